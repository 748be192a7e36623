// Samplers decide which dataset positions an epoch visits, and in what order.
//
// A sampler is immutable and maps (dataset size, epoch) to a list of
// positions, so the same epoch gives the same order on every run, on every
// rank and for any number of DataLoader workers. Shuffling uses loom's
// Philox Generator (randperm), never std::shuffle, whose results differ
// between standard libraries.
//
//   SequentialSampler().indices(5, 0);     // 0 1 2 3 4
//   RandomSampler(42).indices(5, 0);       // a permutation of 0..4, the same every run
//   RandomSampler(42).indices(5, 1);       // another one for epoch 1
//
// DistributedSampler (data/distributed_sampler.h) gives each rank of a
// multi-process job its own share.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

namespace loom::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The positions to visit in `epoch`, in order, for a dataset of
  // `dataset_size` examples; every one is in [0, dataset_size).
  virtual std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const = 0;
  // How many positions indices() returns for that dataset size.
  virtual int64_t num_samples(int64_t dataset_size) const = 0;
};

// 0, 1, ..., n - 1 in every epoch.
class SequentialSampler : public Sampler {
 public:
  std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const override;
  int64_t num_samples(int64_t dataset_size) const override { return dataset_size; }
};

// A permutation of 0..n-1 that is a function of (seed, epoch): the same pair
// always gives the same order, different epochs give different orders.
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(uint64_t seed = 0) : seed_(seed) {}
  std::vector<int64_t> indices(int64_t dataset_size, int64_t epoch) const override;
  int64_t num_samples(int64_t dataset_size) const override { return dataset_size; }
  uint64_t seed() const { return seed_; }

 private:
  uint64_t seed_;
};

// A shared, immutable sampler, as DataLoaderOptions holds one: made from a
// sampler value (copied once) or from a shared_ptr (shared).
//
//   DataLoaderOptions a{.sampler = DistributedSampler(rank, world_size)};
//   DataLoaderOptions b{.sampler = std::make_shared<MySampler>(...)};
class SharedSampler {
 public:
  SharedSampler() = default;  // none
  SharedSampler(std::nullptr_t) {}
  template <typename S, typename = std::enable_if_t<std::is_base_of_v<Sampler, S>>>
  SharedSampler(std::shared_ptr<S> sampler) : sampler_(std::move(sampler)) {}
  template <typename S, typename = std::enable_if_t<std::is_base_of_v<Sampler, std::decay_t<S>>>>
  SharedSampler(S&& sampler)
      : sampler_(std::make_shared<const std::decay_t<S>>(std::forward<S>(sampler))) {}

  explicit operator bool() const { return sampler_ != nullptr; }
  const Sampler& operator*() const { return *sampler_; }
  const Sampler* operator->() const { return sampler_.get(); }

 private:
  std::shared_ptr<const Sampler> sampler_;
};

// The permutation of 0..n-1 that RandomSampler(seed) visits in `epoch`;
// DistributedSampler shuffles with it too, so that all samplers agree.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace loom::data
