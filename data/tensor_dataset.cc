#include "data/tensor_dataset.h"

#include "tensor/ops.h"

namespace loom::data {

TensorDataset::TensorDataset(const Tensor& inputs, const Tensor& targets) {
  LOOM_CHECK(inputs.defined() && targets.defined(),
             "TensorDataset: inputs and targets must be defined tensors");
  LOOM_CHECK(inputs.dim() >= 1 && targets.dim() >= 1, "TensorDataset: inputs (shape ",
             inputs.shape(), ") and targets (shape ", targets.shape(),
             ") need a first dimension that counts examples");
  LOOM_CHECK(inputs.size(0) == targets.size(0), "TensorDataset: ", inputs.size(0),
             " inputs (shape ", inputs.shape(), ") but ", targets.size(0), " targets (shape ",
             targets.shape(), ")");
  LOOM_CHECK(inputs.device() == targets.device(), "TensorDataset: inputs on ", inputs.device(),
             " but targets on ", targets.device());
  inputs_ = inputs.detach();
  targets_ = targets.detach();
}

Example TensorDataset::get(int64_t index) const {
  check_index("TensorDataset", index, size());
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  LOOM_CHECK(!indices.empty(), "TensorDataset::get_batch: no indices given");
  for (int64_t i : indices) check_index("TensorDataset", i, size());
  Tensor index = from_vector<int64_t>(indices, Shape{static_cast<int64_t>(indices.size())},
                                      {.dtype = kInt64, .device = inputs_.device()});
  return {index_select(inputs_, 0, index), index_select(targets_, 0, index)};
}

}  // namespace loom::data
