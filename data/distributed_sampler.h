// DistributedSampler: each rank of a data-parallel job visits its own share
// of the dataset (PyTorch's torch.utils.data.DistributedSampler).
//
// All ranks compute the same order for an epoch (shuffled from seed and epoch,
// or sequential), make its length a multiple of world_size, and rank r takes
// positions r, r + world_size, r + 2 * world_size, ... of it. The shares are
// therefore disjoint and of equal length, so every rank runs the same number
// of steps (a collective that one rank skips would hang the others). When the
// dataset size is not a multiple of world_size, the order is padded by
// repeating its start (wrapping around as often as needed) so that a few
// examples are seen twice, or, with drop_last, its tail is dropped so that a
// few are not seen at all in that epoch.
//
//   DataLoader loader(dataset, {.batch_size = 64,
//                               .sampler = DistributedSampler(rank, world_size)});
//   for (int64_t epoch = 0; epoch < 10; ++epoch)
//     for (Batch& b : loader.epoch(epoch)) { ... }          // a new order each epoch
//
// loader.epoch(e) passes e to the sampler. Code that uses the sampler on its
// own can call set_epoch(e) and indices(n), as in PyTorch.
#pragma once

#include "data/sampler.h"

namespace loom::data {

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int rank, int world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const override;
  // This rank's share length: ceil(n / world_size), or floor with drop_last.
  int64_t num_samples(int64_t dataset_size) const override;

  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices(int64_t dataset_size) const { return indices(dataset_size, epoch_); }

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  int rank_;
  int world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t epoch_ = 0;
};

}  // namespace loom::data
