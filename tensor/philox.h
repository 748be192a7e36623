// Philox4x32-10, the counter-based random number generator of Salmon et al.,
// "Parallel Random Numbers: As Easy as 1, 2, 3" (SC 2011).
//
// A random value is a pure function of (key, counter), so element i of a random
// tensor can be computed independently by any thread, on the CPU or the GPU,
// and both give the same numbers for the same seed. This header is compiled by
// both the host compiler and nvcc.
#pragma once

#include <cstdint>

#include "tensor/host_device.h"

namespace loom::philox {

struct Block {
  uint32_t v[4];
};

LOOM_HOST_DEVICE uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  return static_cast<uint32_t>(product);
}

// Ten rounds of Philox4x32 on `counter` under `key`.
LOOM_HOST_DEVICE Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(kMul0, counter.v[0], &hi0);
    uint32_t lo1 = mulhilo(kMul1, counter.v[2], &hi1);
    counter = Block{{hi1 ^ counter.v[1] ^ key0, lo1, hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// The four random words of element `index` of the draw that starts at `offset`.
LOOM_HOST_DEVICE Block random_block(uint64_t seed, uint64_t offset, uint64_t index) {
  Block counter{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                 static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}};
  return philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in [0, 1) from 24 (float) or 53 (double) random bits.
LOOM_HOST_DEVICE float uniform_float(uint32_t word) { return (word >> 8) * (1.0f / 16777216.0f); }
LOOM_HOST_DEVICE double uniform_double(uint32_t w0, uint32_t w1) {
  uint64_t bits = (static_cast<uint64_t>(w0) << 21) ^ (w1 >> 11);
  return (bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace loom::philox
