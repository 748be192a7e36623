#include "data/distributed_sampler.h"

#include "tensor/error.h"

namespace loom::data {

DistributedSampler::DistributedSampler(int rank, int world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  LOOM_CHECK(world_size >= 1, "DistributedSampler: world_size must be at least 1, got ",
             world_size);
  LOOM_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank ", rank,
             " is out of range for world_size ", world_size);
}

int64_t DistributedSampler::num_samples(int64_t dataset_size) const {
  LOOM_CHECK(dataset_size >= 0, "DistributedSampler: negative dataset size ", dataset_size);
  return drop_last_ ? dataset_size / world_size_ : (dataset_size + world_size_ - 1) / world_size_;
}

std::vector<int64_t> DistributedSampler::indices(int64_t dataset_size, int64_t epoch) const {
  const int64_t per_rank = num_samples(dataset_size);
  const int64_t total = per_rank * world_size_;
  std::vector<int64_t> order = shuffle_ ? epoch_permutation(dataset_size, seed_, epoch)
                                        : SequentialSampler().indices(dataset_size, epoch);
  // order[j % n] pads by wrapping around (total > n) and drops the tail
  // (total < n, drop_last) in one rule.
  std::vector<int64_t> share;
  share.reserve(static_cast<size_t>(per_rank));
  for (int64_t j = rank_; j < total; j += world_size_) share.push_back(order[j % dataset_size]);
  return share;
}

}  // namespace loom::data
