// Eigen's GEMM built for AVX-512 (tensor/cpu/gemm_avx512.cc), which the CPU
// kernels' products (tensor/cpu/gemm.h) use instead of the AVX2 build on
// processors that have AVX-512: twice the FLOPs an instruction (on a 2-core
// Xeon VM, 1024^3 float32: 255-266 against 120-152 GFLOP/s).
//
// Declarations only, of plain types: the .cc file is compiled for
// x86-64-v4, and nothing it compiles may be shared with the rest of loom
// (see there).
#pragma once

#include <cstdint>

namespace loom::cpu {

// Whether this processor (and its OS) runs AVX-512 code, and it is allowed
// (set_avx512_gemm). Checked in an AVX2 file: asking must not need AVX-512.
bool avx512_gemm_enabled();
// Allows or forbids the AVX-512 GEMM (tests and benchmarks compare the two;
// LOOM_CPU_GEMM=avx2 in the environment forbids it from the start).
void set_avx512_gemm(bool allowed);

// C = alpha A B, or C += alpha A B when `accumulate`: A (m x k) and B (k x n)
// each row-major or column-major with the given leading dimension, C (m x n)
// row-major with leading dimension ldc.
void gemm_avx512(const float* a, int64_t lda, bool a_row_major, const float* b, int64_t ldb, bool b_row_major,
                 float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, float alpha, bool accumulate);
void gemm_avx512(const double* a, int64_t lda, bool a_row_major, const double* b, int64_t ldb, bool b_row_major,
                 double* c, int64_t ldc, int64_t m, int64_t n, int64_t k, double alpha, bool accumulate);

}  // namespace loom::cpu
