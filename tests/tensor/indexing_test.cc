// index_select / index_add / gather / scatter_add against hand-computed values.
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;

TEST(Indexing, IndexSelectRowsAndColumns) {
  Tensor x = arange(0, 12, 1).reshape({4, 3});
  Tensor idx = from_vector<int64_t>({3, 0, 3});
  expect_values(index_select(x, 0, idx), {9, 10, 11, 0, 1, 2, 9, 10, 11});
  expect_values(index_select(x, 1, from_vector<int64_t>({2, 0})), {2, 0, 5, 3, 8, 6, 11, 9});
  expect_values(index_select(x.t(), 0, from_vector<int64_t>({1})), {1, 4, 7, 10});  // strided source
}

TEST(Indexing, IndexAddAccumulatesRepeatedIndices) {
  Tensor x = zeros({3, 2});
  Tensor src = from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  expect_values(index_add(x, 0, from_vector<int64_t>({2, 0, 2}), src), {3, 4, 0, 0, 6, 8});
}

TEST(Indexing, GatherAndScatterAdd) {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  // dim 1: out[i][j] = x[i][index[i][j]]
  expect_values(gather(x, 1, from_vector<int64_t>({2, 0, 1, 1}, {2, 2})), {3, 1, 5, 5});
  // dim 0: out[i][j] = x[index[i][j]][j]
  expect_values(gather(x, 0, from_vector<int64_t>({1, 0, 1}, {1, 3})), {4, 2, 6});
  Tensor base = zeros({2, 3});
  Tensor src = ones({2, 2});
  expect_values(scatter_add(base, 1, from_vector<int64_t>({2, 2, 0, 1}, {2, 2}), src), {0, 0, 2, 1, 1, 0});
}

TEST(Indexing, OutOfRangeIndicesAreClearErrorsAndChangeNothing) {
  Tensor x = arange(0, 6, 1).reshape({3, 2});
  EXPECT_THROW_MSG(index_select(x, 0, from_vector<int64_t>({0, 3})),
                   "index_select: index 3 is out of range for dimension 0 of size 3");
  EXPECT_THROW_MSG(index_select(x, 0, from_vector<int64_t>({-1})), "index -1 is out of range");
  EXPECT_THROW_MSG(gather(x, 1, from_vector<int64_t>({0, 2}, {1, 2})),
                   "gather: index 2 is out of range for dimension 1 of size 2");
  Tensor target = zeros({3, 2});
  EXPECT_THROW_MSG(scatter_add(target, 0, from_vector<int64_t>({0, 5}, {1, 2}), ones({1, 2})),
                   "scatter_add: index 5 is out of range for dimension 0 of size 3");
  expect_values(target, std::vector<double>(6, 0.0));  // untouched
  EXPECT_THROW_MSG(index_select(x, 0, from_vector<float>({0})), "index_select: indices must be int64, got float32");
  EXPECT_THROW_MSG(gather(x, 0, from_vector<int64_t>({0})), "gather: index has 1 dimensions but the tensor has 2");
  EXPECT_THROW_MSG(index_add(x, 0, from_vector<int64_t>({0}), ones({2, 2})),
                   "index_add: src of shape [2, 2] does not match");
}

}  // namespace
}  // namespace loom
