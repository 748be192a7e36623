// Seedable random number generator shared by the CPU and CUDA backends.
//
// A Generator is a (seed, offset) pair over Philox (philox.h): each random op
// reserves one offset and draws element i from (seed, offset, i). The same
// seed gives the same numbers on every device and any number of threads.
//
//   manual_seed(42);                    // the default generator
//   Tensor a = randn({2, 3});
//   Generator g(7);
//   Tensor b = rand({4}, {}, &g);       // an explicit generator
#pragma once

#include <atomic>
#include <cstdint>

namespace loom {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  void manual_seed(uint64_t seed) {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const { return seed_; }
  // Reserves `count` draws and returns the offset of the first; thread-safe.
  uint64_t reserve(uint64_t count = 1) { return offset_.fetch_add(count); }

  GeneratorState state() const { return {seed_, offset_.load()}; }
  void set_state(const GeneratorState& state) {
    seed_ = state.seed;
    offset_ = state.offset;
  }

  // One random 64-bit word, for host-side uses (shuffling, sampling).
  uint64_t next_u64();
  // A uniform double in [0, 1), for host-side uses.
  double next_double();

 private:
  uint64_t seed_;
  std::atomic<uint64_t> offset_{0};
};

// The process-wide default generator, used when an op is given none. It is
// shared by all threads on purpose (as torch.manual_seed's is).
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace loom
