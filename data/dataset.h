// Dataset: examples addressed by position, the thing a DataLoader batches.
//
// A dataset knows its size() and returns example i with get(i). The
// DataLoader asks for whole batches with get_batch(indices); its default
// stacks get(i) of each index, and datasets held in memory override it with
// one gather per field, so that building a batch allocates a few tensors per
// batch and nothing per example.
//
//   class Squares : public Dataset {
//    public:
//     int64_t size() const override { return 100; }
//     Example get(int64_t i) const override {
//       return {full({1}, double(i)), full({1}, double(i * i))};
//     }
//   };
//   Batch b = Squares().get_batch({3, 1, 4});   // input [3, 1]: 3, 1, 4; target: 9, 1, 16
//
// The DataLoader calls get() and get_batch() from several worker threads at
// once, so they must be safe to call concurrently (they are const; a dataset
// with caches must lock them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace loom::data {

struct Example {
  Tensor input;
  Tensor target;
};

// A batch: every field has the batch as its first dimension.
struct Batch {
  Tensor input;   // (B, ...) of the examples' input shape
  Tensor target;  // (B, ...) of the examples' target shape
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices` (in that order, repeats allowed) stacked along
  // a new first dimension.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// Throws unless 0 <= index < size, naming `who` (the dataset) in the message.
void check_index(const char* who, int64_t index, int64_t size);

}  // namespace loom::data
