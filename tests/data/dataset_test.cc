// Dataset's default get_batch and TensorDataset.
#include <gtest/gtest.h>

#include <atomic>

#include "data/tensor_dataset.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

using testing::values;

// Example i: input [i, -i] (float32), target i * i (int64 0-D).
class Squares : public Dataset {
 public:
  int64_t size() const override { return 10; }
  Example get(int64_t i) const override {
    check_index("Squares", i, size());
    ++gets;
    return {from_vector<float>({float(i), float(-i)}),
            scalar_tensor(double(i * i), {.dtype = kInt64})};
  }
  mutable std::atomic<int> gets{0};
};

TEST(Dataset, DefaultGetBatchStacksExamples) {
  Squares ds;
  Batch b = ds.get_batch({3, 1, 3});
  EXPECT_EQ(b.input.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.input.dtype(), kFloat32);
  EXPECT_EQ(values(b.input), (std::vector<double>{3, -3, 1, -1, 3, -3}));
  EXPECT_EQ(b.target.shape(), (Shape{3}));
  EXPECT_EQ(b.target.dtype(), kInt64);
  EXPECT_EQ(values(b.target), (std::vector<double>{9, 1, 9}));
  EXPECT_EQ(ds.gets.load(), 3);
  EXPECT_THROW_MSG(ds.get_batch({}), "Dataset::get_batch: no indices given");
  EXPECT_THROW_MSG(ds.get_batch({1, 10}), "Squares: index 10 is out of range for 10 examples");
}

TEST(TensorDataset, GetReturnsRowViews) {
  Tensor x = arange(0, 12, 1).view({4, 3});  // row i: 3i, 3i+1, 3i+2
  Tensor y = from_vector<int64_t>({10, 11, 12, 13});
  TensorDataset ds(x, y);
  EXPECT_EQ(ds.size(), 4);
  Example e = ds.get(2);
  EXPECT_EQ(e.input.shape(), (Shape{3}));
  EXPECT_EQ(values(e.input), (std::vector<double>{6, 7, 8}));
  EXPECT_EQ(e.target.dim(), 0);
  EXPECT_EQ(e.target.item<int64_t>(), 12);
  EXPECT_EQ(e.input.storage(), x.storage());  // no copy
  EXPECT_THROW_MSG(ds.get(4), "TensorDataset: index 4 is out of range for 4 examples");
  EXPECT_THROW_MSG(ds.get(-1), "TensorDataset: index -1 is out of range");
}

TEST(TensorDataset, GetBatchGathersRowsInOrder) {
  Tensor x = arange(0, 24, 1).view({4, 2, 3});
  Tensor y = from_vector<int64_t>({0, 1, 2, 3});
  TensorDataset ds(x, y);
  Batch b = ds.get_batch({3, 0, 3});
  EXPECT_EQ(b.input.shape(), (Shape{3, 2, 3}));
  EXPECT_EQ(values(b.input), (std::vector<double>{18, 19, 20, 21, 22, 23, 0, 1, 2, 3, 4, 5, 18, 19,
                                                  20, 21, 22, 23}));
  EXPECT_EQ(values(b.target), (std::vector<double>{3, 0, 3}));
  // Same as the default (stacking get(i)), which is the reference.
  Batch reference = ds.Dataset::get_batch({3, 0, 3});
  EXPECT_EQ(values(b.input), values(reference.input));
  EXPECT_EQ(values(b.target), values(reference.target));
  EXPECT_THROW_MSG(ds.get_batch({0, 7}), "TensorDataset: index 7 is out of range for 4 examples");
  EXPECT_THROW_MSG(ds.get_batch({}), "TensorDataset::get_batch: no indices given");
}

TEST(TensorDataset, DetachesItsTensors) {
  Tensor x = randn({5, 2}, {.requires_grad = true});
  TensorDataset ds(x, zeros({5}));
  EXPECT_FALSE(ds.inputs().requires_grad());
  EXPECT_FALSE(ds.get_batch({1, 2}).input.requires_grad());
}

TEST(TensorDataset, ShapesMustAgree) {
  EXPECT_THROW_MSG(TensorDataset(zeros({5, 2}), zeros({4})),
                   "TensorDataset: 5 inputs (shape [5, 2]) but 4 targets (shape [4])");
  EXPECT_THROW_MSG(TensorDataset(scalar_tensor(1), zeros({1})),
                   "need a first dimension that counts examples");
  EXPECT_THROW_MSG(TensorDataset(Tensor(), zeros({1})),
                   "TensorDataset: inputs and targets must be defined");
}

}  // namespace
}  // namespace loom::data
