// TensorDataset: examples that are the rows of two tensors (PyTorch's
// torch.utils.data.TensorDataset, with one input and one target tensor).
//
//   TensorDataset ds(randn({100, 3}), arange(100));   // 100 examples
//   Example e = ds.get(7);            // input: row 7, shape [3]; target: 0-D, 7
//   Batch b = ds.get_batch({7, 2});   // input [2, 3], target [2]
//
// get() returns views of the rows (no copy). get_batch() gathers the rows
// with one index_select per tensor. The tensors are detached: data carries no
// autograd history into the model.
#pragma once

#include "data/dataset.h"

namespace loom::data {

class TensorDataset : public Dataset {
 public:
  // inputs: (N, ...), targets: (N, ...), the same N, on any one device.
  TensorDataset(const Tensor& inputs, const Tensor& targets);

  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace loom::data
