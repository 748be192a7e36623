// The CUDA softmax's choice of register layout, on the CPU: every row
// length the register kernels take gets a layout that holds the whole row,
// the smallest such, and the backward's never holds more than 16 per thread.
// (Rows of 513 to 1024 once launched no backward kernel at all.)
#include "tensor/cuda/softmax_layout.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom::cuda {
namespace {

struct Layout {
  int group = 0, elems = 0;
  int64_t holds() const { return int64_t{group} * elems; }
};

Layout forward_layout(int64_t size) {
  Layout chosen;
  with_row_config(size, [&](auto group, auto elems) { chosen = {decltype(group)::value, decltype(elems)::value}; });
  return chosen;
}

Layout backward_layout(int64_t size) {
  Layout chosen;
  with_backward_row_config(size,
                           [&](auto group, auto elems) { chosen = {decltype(group)::value, decltype(elems)::value}; });
  return chosen;
}

TEST(SoftmaxLayout, EveryForwardRowFitsTheSmallestLayoutThatHoldsIt) {
  for (int64_t size = 1; size <= kMaxBlockRow; ++size) {
    const Layout layout = forward_layout(size);
    ASSERT_GE(layout.holds(), size) << "rows of " << size;
    ASSERT_EQ(layout.group, size <= kMaxWarpRow ? 32 : kRowBlock) << "rows of " << size;
    // Half the elements per thread would not hold it (the layouts double).
    if (layout.elems > (layout.group == 32 ? 1 : 4)) {
      ASSERT_LT(int64_t{layout.group} * (layout.elems / 2), size) << "rows of " << size;
    }
  }
}

TEST(SoftmaxLayout, EveryBackwardRowFitsAndKeepsAtMost16PerThread) {
  for (int64_t size = 1; size <= kMaxBlockRowBackward; ++size) {
    const Layout layout = backward_layout(size);
    ASSERT_GE(layout.holds(), size) << "rows of " << size;
    ASSERT_LE(layout.elems, 16) << "rows of " << size;
    ASSERT_GE(layout.elems, 1) << "rows of " << size << ": no kernel chosen";
  }
  EXPECT_EQ(backward_layout(513).group, kRowBlock) << "a warp would need 32 per lane";
  EXPECT_EQ(backward_layout(1024).group, kRowBlock);
}

TEST(SoftmaxLayout, LongerRowsAreAnInternalError) {
  EXPECT_THROW_MSG(forward_layout(kMaxBlockRow + 1), "no register layout for rows of 16385");
  EXPECT_THROW_MSG(backward_layout(kMaxBlockRowBackward + 1), "no register layout for rows of 8193");
  EXPECT_THROW_MSG(forward_layout(0), "no register layout for rows of 0");
}

}  // namespace
}  // namespace loom::cuda
