// The value of element i of a random draw, shared by the CPU and CUDA backends
// so both produce the same numbers for the same (seed, offset).
//
// Multiply-adds are written as fma() on purpose: compilers may fuse `a + b * c`
// into one FMA or not (GCC does for x86-64-v3 in C++ mode, nvcc does by
// default), and the two roundings differ. An explicit fma rounds once on
// every device, so uniform, randint and bernoulli draws are bit-identical on
// the CPU and the GPU; normal draws may still differ in the last bit, where
// the host's and CUDA's log and cos do.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/philox.h"

namespace loom::random_draw {

// Uniform double in [0, 1) from the block's first two words.
LOOM_HOST_DEVICE double uniform01(const philox::Block& b) { return philox::uniform_double(b.v[0], b.v[1]); }

LOOM_HOST_DEVICE double uniform(uint64_t seed, uint64_t offset, uint64_t i, double lo, double hi) {
  return fma(hi - lo, uniform01(philox::random_block(seed, offset, i)), lo);
}

// Box-Muller on two 53-bit uniforms, in double so that hosts and GPUs agree.
LOOM_HOST_DEVICE double normal(uint64_t seed, uint64_t offset, uint64_t i, double mean, double stddev) {
  philox::Block b = philox::random_block(seed, offset, i);
  double u1 = 1.0 - philox::uniform_double(b.v[0], b.v[1]);  // (0, 1]: log is finite
  double u2 = philox::uniform_double(b.v[2], b.v[3]);
  double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
  return fma(stddev, z, mean);
}

// Integer in [lo, hi).
LOOM_HOST_DEVICE int64_t randint(uint64_t seed, uint64_t offset, uint64_t i, int64_t lo, int64_t hi) {
  philox::Block b = philox::random_block(seed, offset, i);
  uint64_t word = (static_cast<uint64_t>(b.v[0]) << 32) | b.v[1];
  return lo + static_cast<int64_t>(word % static_cast<uint64_t>(hi - lo));
}

LOOM_HOST_DEVICE bool bernoulli(uint64_t seed, uint64_t offset, uint64_t i, double p) {
  return uniform01(philox::random_block(seed, offset, i)) < p;
}

}  // namespace loom::random_draw
