// A float32 product by a right operand packed into the micro-kernel's
// panels, and a left operand read where it lies, an element broadcast at a
// time (Eigen's GEMM packs both operands at every call). Two users: the
// products of a recurrence, where one weight packed once multiplies a new
// state at every step (prepared_product.cc), and float32 matmuls, B packed
// at each call (matmul.cc).
//
//   PackedMatrix w({b, ldb, /*row_major=*/false}, k, n);  // once a sequence
//   w.multiply({h, ldh, /*row_major=*/true}, m, gates, ldg);  // every step: gates = h B
//
// AVX2 and FMA (loom's x86-64-v3 build). On a 2-core Zen 3 VM, the LSTM
// step's 64 x 512 x 128 and 64 x 128 x 512: 81-89 GFLOP/s against Eigen's
// 64-73; a GPT's Linear layers, packing included: 86-97 against 75-87
// (docs/benchmarks.md).
#pragma once

#include <cstdint>

#include "tensor/cpu/gemm_operand.h"
#include "tensor/tensor.h"

namespace loom::cpu {

class PackedMatrix {
 public:
  // Packs B (k x n).
  PackedMatrix(const GemmOperand<float>& b, int64_t k, int64_t n);

  int64_t rows() const { return k_; }
  int64_t cols() const { return n_; }

  // c (m x n, row pitch ldc) = a (m x k) B, plus `bias` (n values) in every
  // row where it is given. Each element is one chain of fused
  // multiply-adds, from the bias (or zero) through p = 0 .. k - 1, so a
  // row's values do not depend on m, on the rows around it or on a's
  // layout. A column-major a is copied 6 rows at a time into a per-thread
  // buffer; a row-major one is read in place. Reads B only, so threads may
  // multiply at the same time into disjoint outputs.
  void multiply(const GemmOperand<float>& a, int64_t m, float* c, int64_t ldc, const float* bias = nullptr) const;

 private:
  int64_t k_, n_;
  // ceil(n / 16) panels of k rows by 16 columns, zero past column n.
  Tensor panels_;
};

}  // namespace loom::cpu
