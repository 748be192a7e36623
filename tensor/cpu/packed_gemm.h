// A float32 product by a right operand packed into the micro-kernel's
// panels, and a left operand read where it lies, an element broadcast at a
// time (Eigen's GEMM packs both operands at every call). Two users: the
// products of a recurrence, where one weight packed once multiplies a new
// state at every step (prepared_product.cc), and packed_gemm below, B
// packed at each call, which gemm.h picks for every float32 product of the
// shapes where it is faster than Eigen's GEMM.
//
//   PackedMatrix w({b, ldb, /*row_major=*/false}, k, n);  // once a sequence
//   w.multiply({h, ldh, /*row_major=*/true}, m, gates, ldg);  // every step: gates = h B
//
// AVX2 and FMA (loom's x86-64-v3 build). On a 2-core Zen 3 VM, the LSTM
// step's 64 x 512 x 128 and 64 x 128 x 512: 81-89 GFLOP/s against Eigen's
// 64-73; a GPT's Linear layers, packing included: 80-98, 1.0-1.1x Eigen's
// rate in the same runs (docs/benchmarks.md).
#pragma once

#include <cstdint>

#include "tensor/cpu/gemm_operand.h"
#include "tensor/tensor.h"

namespace loom::cpu {

// What a packed product writes: c = alpha sums, or c += alpha sums with
// `accumulate`, where each row's sums start from `bias` (n values) or zero.
struct PackedOutput {
  const float* bias = nullptr;
  float alpha = 1;
  bool accumulate = false;
};

class PackedMatrix {
 public:
  // Packs B (k x n) into memory of its own.
  PackedMatrix(const GemmOperand<float>& b, int64_t k, int64_t n);
  // Packs B into `storage`, storage_size(k, n) floats the caller keeps.
  PackedMatrix(const GemmOperand<float>& b, int64_t k, int64_t n, float* storage);
  static int64_t storage_size(int64_t k, int64_t n);

  int64_t rows() const { return k_; }
  int64_t cols() const { return n_; }

  // c (m x n, row pitch ldc) = a (m x k) B, written as `out` says. Each sum
  // is one chain of fused multiply-adds, from the bias (or zero) through
  // p = 0 .. k - 1, so a row's values do not depend on m, on the rows
  // around it or on a's layout. A column-major a is copied 6 rows at a time
  // into a per-thread buffer; a row-major one is read in place. Reads B
  // only, so threads may multiply at the same time into disjoint outputs.
  void multiply(const GemmOperand<float>& a, int64_t m, float* c, int64_t ldc, const PackedOutput& out = {}) const;
  // The same with B's first k rows and n columns only: c (m x n) = a (m x k)
  // B[0:k, 0:n]. Causal attention packs a slice's keys once and each block
  // of queries multiplies by the keys it sees.
  void multiply_leading(const GemmOperand<float>& a, int64_t m, int64_t k, int64_t n, float* c, int64_t ldc,
                        const PackedOutput& out = {}) const;

 private:
  void pack(const GemmOperand<float>& b);

  int64_t k_, n_;
  Tensor owned_;  // the panels' memory, when no storage was given
  // ceil(n / 16) panels of k rows by 16 columns, zero past column n.
  float* panels_;
};

// Whether the packed kernel runs c = a b faster than Eigen's GEMM on this
// processor (docs/benchmarks.md): no AVX-512 (whose Eigen build is faster),
// at least 16 rows and 16 columns with little padding in the last panel,
// b of at most 1 MB, so its panels stay near the core, and a row-major a
// or a column-major one of depth k at most 1024.
bool packed_gemm_wins(int64_t m, int64_t n, int64_t k, bool a_row_major);

// c (m x n, row pitch ldc) = alpha a b (or += with out.accumulate, sums from
// out.bias): b packed into a per-thread buffer, row tiles on OpenMP
// threads. The bits do not depend on the thread count.
void packed_gemm(const GemmOperand<float>& a, const GemmOperand<float>& b, float* c, int64_t ldc, int64_t m, int64_t n,
                 int64_t k, const PackedOutput& out = {});

}  // namespace loom::cpu
