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

// The sum of a row in the same order wherever the row lies. Eigen's sum()
// of a plain map first steps to an aligned address, so the same values at
// another address (a view's offset, a buffer from malloc) would be added in
// another order and round differently: a DDP rank's row would not match
// one device's bit for bit. An expression has no address, and its vector
// lanes start at the first element; x + 0 is x.
template <typename Derived>
typename Derived::Scalar fixed_order_sum(const Eigen::ArrayBase<Derived>& row) {
  return (row + typename Derived::Scalar(0)).sum();
}

}  // namespace loom::cpu
