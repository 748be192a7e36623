// merge_dims and element_offsets, the layout both elementwise engines run
// over (element_offsets is what every strided CUDA elementwise kernel does
// per element): merged dims counted by hand, and the byte offsets of every
// element of permuted, sliced and broadcast operands against their strides.
#include "tensor/merged_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "tensor/ops.h"
#include "tests/test_util.h"

namespace loom {
namespace {

// Byte offset of row-major element `linear` of `shape` in t (t's own strides).
int64_t reference_offset(const Tensor& t, const Shape& shape, int64_t linear) {
  int64_t offset = 0;
  for (int d = shape.size() - 1; d >= 0; --d) {
    offset += (linear % shape[d]) * t.stride(d);
    linear /= shape[d];
  }
  return offset * static_cast<int64_t>(t.element_size());
}

template <int N>
void expect_offsets_match(const std::array<const Tensor*, N>& operands, const Shape& shape) {
  const MergedLayout<N> layout = merge_dims<N>(operands, shape);
  for (int k = 0; k < N; ++k) ASSERT_EQ(layout.base[k], static_cast<char*>(operands[k]->raw_data()));
  int64_t merged = 1;
  for (int d = 0; d < layout.dims; ++d) merged *= layout.sizes[d];
  ASSERT_EQ(merged, numel(shape)) << "the merged dims hold every element of " << shape;
  for (int64_t i = 0; i < numel(shape); ++i) {
    int64_t offset[N];
    element_offsets(layout, i, offset);
    for (int k = 0; k < N; ++k)
      ASSERT_EQ(offset[k], reference_offset(*operands[k], shape, i)) << "operand " << k << ", element " << i
                                                                     << " of " << shape;
  }
}

TEST(MergedLayout, ContiguousOperandsAndScalarsBecomeOneDim) {
  Tensor out = empty({4, 5, 6}), x = randn({4, 5, 6}), scalar = full({1}, 2.0).expand({4, 5, 6});
  const MergedLayout<3> layout = merge_dims<3>({&out, &x, &scalar}, out.shape());
  ASSERT_EQ(layout.dims, 1);
  EXPECT_EQ(layout.sizes[0], 120);
  EXPECT_EQ(layout.strides[0][0], 4);
  EXPECT_EQ(layout.strides[0][1], 4);
  EXPECT_EQ(layout.strides[0][2], 0);
  expect_offsets_match<3>({&out, &x, &scalar}, out.shape());
}

TEST(MergedLayout, SizeOneDimsAreDroppedAndASingleElementHasNoDims) {
  Tensor a = empty({1, 7, 1}), b = randn({1, 7, 1}, {.dtype = kFloat64});
  const MergedLayout<2> layout = merge_dims<2>({&a, &b}, a.shape());
  ASSERT_EQ(layout.dims, 1);
  EXPECT_EQ(layout.strides[0][1], 8);
  Tensor one = empty({1, 1}), other = empty({1, 1});
  EXPECT_EQ((merge_dims<2>({&one, &other}, one.shape()).dims), 0);
  expect_offsets_match<2>({&one, &other}, one.shape());
}

TEST(MergedLayout, ATransposeKeepsItsDimsApart) {
  Tensor x = randn({3, 4, 5});
  Tensor xt = x.transpose(0, 2);  // (5, 4, 3)
  Tensor out = empty({5, 4, 3});
  const MergedLayout<2> layout = merge_dims<2>({&out, &xt}, out.shape());
  EXPECT_EQ(layout.dims, 3);
  expect_offsets_match<2>({&out, &xt}, out.shape());
  // The inner two dims of x stay contiguous under a permute of the outer one.
  Tensor y = randn({4, 3, 5, 6}).transpose(0, 1);  // (3, 4, 5, 6): the last two merge
  Tensor out2 = empty({3, 4, 5, 6});
  EXPECT_EQ((merge_dims<2>({&out2, &y}, out2.shape()).dims), 3);
  expect_offsets_match<2>({&out2, &y}, out2.shape());
}

TEST(MergedLayout, RandomViewsGiveEveryElementsOffset) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int dims = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> sizes;
    for (int d = 0; d < dims; ++d) sizes.push_back(1 + static_cast<int64_t>(rng() % 4));
    // x: a permuted, step-sliced view; b: broadcast along random dims.
    std::vector<int64_t> big(sizes);
    for (auto& s : big) s = 2 * s + 1;
    Tensor x = randn(Shape(big), {.dtype = trial % 2 ? kFloat64 : kFloat32});
    for (int d = 0; d < dims; ++d) x = x.slice(d, rng() % 2, rng() % 2 + 2 * sizes[d], 2);
    std::vector<int64_t> order(dims);
    for (int d = 0; d < dims; ++d) order[d] = d;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> permuted_sizes(dims);
    for (int d = 0; d < dims; ++d) permuted_sizes[d] = x.size(order[d]);
    x = x.permute(order);
    std::vector<int64_t> b_sizes(permuted_sizes);
    for (auto& s : b_sizes)
      if (rng() % 2) s = 1;
    Tensor b = randn(Shape(b_sizes)).expand(permuted_sizes);
    Tensor out = empty(Shape(permuted_sizes), {.dtype = kFloat64});
    ASSERT_EQ(x.shape(), out.shape());
    expect_offsets_match<3>({&out, &x, &b}, out.shape());
  }
}

TEST(MergedLayout, OffsetsPastThirtyTwoBitsUseTheWideDivision) {
  // Only the layout is built: no tensor of that size is allocated.
  MergedLayout<1> layout;
  layout.dims = 2;
  layout.sizes[0] = int64_t{3} << 31;
  layout.sizes[1] = 5;
  layout.strides[0][0] = 2;
  layout.strides[1][0] = int64_t{1} << 40;
  int64_t offset[1];
  element_offsets(layout, (int64_t{3} << 31) * 4 + 7, offset);
  EXPECT_EQ(offset[0], 7 * 2 + 4 * (int64_t{1} << 40));
}

}  // namespace
}  // namespace loom
