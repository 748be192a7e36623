// Eigen views of raw loom buffers, for the contiguous fast paths of CPU kernels.
#pragma once

#include <Eigen/Core>
#include <cstdint>

namespace loom::cpu {

template <typename T>
using Array1 = Eigen::Array<T, Eigen::Dynamic, 1>;
template <typename T>
using ArrayMap = Eigen::Map<Array1<T>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Array1<T>>;

template <typename T>
ArrayMap<T> array_map(char* p, int64_t n) {
  return ArrayMap<T>(reinterpret_cast<T*>(p), n);
}
template <typename T>
ConstArrayMap<T> const_array_map(const char* p, int64_t n) {
  return ConstArrayMap<T>(reinterpret_cast<const T*>(p), n);
}
template <typename T>
T& at(char* p, int64_t byte_offset) {
  return *reinterpret_cast<T*>(p + byte_offset);
}

}  // namespace loom::cpu
