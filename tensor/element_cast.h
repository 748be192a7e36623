// How a value becomes an element of another dtype, the same in the CPU
// backend and in CUDA kernels: static_cast, except that a floating value
// reaches uint8 through int64, as in PyTorch (-1.0 becomes 255). The direct
// cast is undefined below 0, and the compilers disagree on it: GCC's code
// wraps, nvcc's clamps to 0.
#pragma once

#include <cstdint>
#include <type_traits>

#include "tensor/philox.h"  // LOOM_HOST_DEVICE

namespace loom {

template <typename To, typename From>
LOOM_HOST_DEVICE To element_cast(From x) {
  if constexpr (std::is_same_v<To, uint8_t> && !std::is_integral_v<From>)
    return static_cast<uint8_t>(static_cast<int64_t>(x));
  else
    return static_cast<To>(x);
}

}  // namespace loom
