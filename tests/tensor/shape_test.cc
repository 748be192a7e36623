#include "tensor/shape.h"

#include <gtest/gtest.h>

#include "tensor/creation.h"
#include "tests/test_util.h"

namespace loom {
namespace {

TEST(Shape, ContiguousStridesAndNumel) {
  Shape s{2, 3, 4};
  EXPECT_EQ(contiguous_strides(s), (Strides{12, 4, 1}));
  EXPECT_EQ(numel(s), 24);
  EXPECT_EQ(numel(Shape{}), 1);  // a scalar
  EXPECT_EQ(numel(Shape{3, 0}), 0);
}

// Sizes whose products leave int64 are errors, not wrapped strides (UBSan
// once flagged [0, 2^62, 2^62]: no elements, but strides of 2^124).
TEST(Shape, OverflowingProductsAreErrors) {
  const int64_t huge = int64_t{1} << 62;
  EXPECT_THROW_MSG(contiguous_strides(Shape{0, huge, huge}), "its strides do not fit in 64 bits");
  EXPECT_THROW_MSG(numel(Shape{huge, 4}), "more elements than fit in 64 bits");
  EXPECT_THROW_MSG(empty({0, huge, huge}), "do not fit in 64 bits");
  EXPECT_EQ(contiguous_strides(Shape{2, huge}), (Strides{huge, 1}));  // the largest that fit still do
}

TEST(Shape, IsContiguousIgnoresSizeOneDims) {
  EXPECT_TRUE(is_contiguous({2, 3}, {3, 1}));
  EXPECT_FALSE(is_contiguous({2, 3}, {1, 2}));
  EXPECT_TRUE(is_contiguous({2, 1, 3}, {3, 99, 1}));
}

TEST(Shape, BroadcastFollowsNumPy) {
  EXPECT_EQ(broadcast_shapes({3, 1}, {4}, "t"), (Shape{3, 4}));
  EXPECT_EQ(broadcast_shapes({2, 1, 5}, {3, 1}, "t"), (Shape{2, 3, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}, "t"), (Shape{2, 2}));
  EXPECT_THROW_MSG(broadcast_shapes({2, 3}, {4, 3}, "add"), "add: shapes [2, 3] and [4, 3] do not broadcast");
}

TEST(Shape, WrapDimAcceptsNegativeAndRejectsOutOfRange) {
  EXPECT_EQ(wrap_dim(-1, 3, "t"), 2);
  EXPECT_EQ(wrap_dim(0, 0, "t"), 0);  // scalars accept dim 0 and -1
  EXPECT_EQ(wrap_dim(-1, 0, "t"), 0);
  EXPECT_THROW_MSG(wrap_dim(3, 3, "sum"), "sum: dimension 3 is out of range for a tensor of 3 dimensions");
}

TEST(Shape, InferShapeFillsMinusOne) {
  EXPECT_EQ(infer_shape({-1, 4}, 12, "view"), (Shape{3, 4}));
  EXPECT_THROW_MSG(infer_shape({-1, -1}, 12, "view"), "only one dimension can be -1");
  EXPECT_THROW_MSG(infer_shape({5, -1}, 12, "view"), "view: shape [5, -1] is invalid for a tensor of 12 elements");
  EXPECT_THROW_MSG(infer_shape({2, 2}, 12, "reshape"), "is invalid for a tensor of 12 elements");
}

TEST(Shape, AtMostEightDims) {
  EXPECT_THROW_MSG(Shape({1, 1, 1, 1, 1, 1, 1, 1, 1}), "at most 8 dimensions");
}

}  // namespace
}  // namespace loom
