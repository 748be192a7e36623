#include "data/sampler.h"

#include <numeric>

#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::data {
namespace {

// SplitMix64's finaliser: spreads (seed, epoch) over the whole seed space, so
// that (seed, epoch + 1) and (seed + 1, epoch) give unrelated orders (PyTorch
// seeds with seed + epoch, which makes them the same).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void check_size(const char* who, int64_t dataset_size) {
  LOOM_CHECK(dataset_size >= 0, who, ": negative dataset size ", dataset_size);
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  check_size("epoch_permutation", n);
  Generator gen(mix(mix(seed) ^ static_cast<uint64_t>(epoch)));
  Tensor perm = randperm(n, &gen);
  const int64_t* p = perm.data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t dataset_size, int64_t /*epoch*/) const {
  check_size("SequentialSampler", dataset_size);
  std::vector<int64_t> out(static_cast<size_t>(dataset_size));
  std::iota(out.begin(), out.end(), int64_t{0});
  return out;
}

std::vector<int64_t> RandomSampler::indices(int64_t dataset_size, int64_t epoch) const {
  check_size("RandomSampler", dataset_size);
  return epoch_permutation(dataset_size, seed_, epoch);
}

}  // namespace loom::data
