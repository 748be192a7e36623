#include "data/dataset.h"

#include "tensor/ops.h"

namespace loom::data {

void check_index(const char* who, int64_t index, int64_t size) {
  LOOM_CHECK(index >= 0 && index < size, who, ": index ", index, " is out of range for ", size,
             " examples");
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  LOOM_CHECK(!indices.empty(), "Dataset::get_batch: no indices given");
  TensorList inputs, targets;
  inputs.reserve(indices.size());
  targets.reserve(indices.size());
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(std::move(e.input));
    targets.push_back(std::move(e.target));
  }
  return {stack(inputs), stack(targets)};
}

}  // namespace loom::data
