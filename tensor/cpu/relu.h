// ReLU's rule on the CPU, in one place: the elementwise op and its backward
// (elementwise.cc), and the ReLU that convolutions fuse (conv.cc, and
// shallow_conv.h's kernels).
#pragma once

#include <cstdint>

namespace loom::cpu {

// max(v, 0), except that NaN stays NaN (as in PyTorch and on the GPU); -0
// gives +0.
template <typename T>
T relu_value(T v) {
  return (v > T(0) || v != v) ? v : T(0);
}

// ReLU's gradient from its output y: dy where y > 0 (or NaN), else 0.
template <typename T>
T relu_gradient(T dy, T y) {
  return y <= T(0) ? T(0) : dy;
}

// relu_gradient over a row of n elements. dy is read whatever y says: a
// conditional read (`y <= 0 ? 0 : dy[q]`) compiles to a masked load, which
// AMD's Zen cores run slowly.
template <typename T>
void relu_gradient_row(const T* dy, const T* y, int64_t n, T* out) {
#pragma omp simd
  for (int64_t q = 0; q < n; ++q) out[q] = relu_gradient(dy[q], y[q]);
}

}  // namespace loom::cpu
