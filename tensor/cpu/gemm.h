// The one matrix product every CPU kernel calls (matmul, convolution,
// fused attention): Eigen's GEMM, its AVX-512 build on processors that have
// AVX-512 (gemm_avx512.h); elsewhere loom's packed AVX2 kernel for float32
// where it measured faster (packed_gemm.h) and this file's AVX2 build of
// Eigen's for the rest.
//
//   // C (m x n, row pitch ldc) = alpha A B, or += with `accumulate`
//   gemm<float>({a, lda, /*row_major=*/true}, {b, ldb, false}, c, ldc, m, n, k);
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <type_traits>

#include "tensor/cpu/gemm_avx512.h"
#include "tensor/cpu/gemm_operand.h"
#include "tensor/cpu/packed_gemm.h"

namespace loom::cpu {

namespace detail {

template <typename T, int Order>
using OperandMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;

template <typename T, int OrderA, int OrderB>
void eigen_gemm(const GemmOperand<T>& a, const GemmOperand<T>& b, T* c, int64_t ldc, int64_t m, int64_t n, int64_t k,
                T alpha, bool accumulate) {
  OperandMap<T, OrderA> A(a.data, m, k, Eigen::OuterStride<>(a.ld));
  OperandMap<T, OrderB> B(b.data, k, n, Eigen::OuterStride<>(b.ld));
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>> C(
      c, m, n, Eigen::OuterStride<>(ldc));
  if (accumulate)
    C.noalias() += alpha * (A * B);
  else if (alpha == T(1))
    C.noalias() = A * B;
  else
    C.noalias() = alpha * (A * B);
}

}  // namespace detail

template <typename T>
void gemm(const GemmOperand<T>& a, const GemmOperand<T>& b, T* c, int64_t ldc, int64_t m, int64_t n, int64_t k,
          T alpha = T(1), bool accumulate = false) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (avx512_gemm_enabled())
      return gemm_avx512(a.data, a.ld, a.row_major, b.data, b.ld, b.row_major, c, ldc, m, n, k, alpha, accumulate);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (packed_gemm_wins(m, n, k, a.row_major))
      return packed_gemm(a, b, c, ldc, m, n, k, {nullptr, alpha, accumulate});
  }
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (a.row_major && b.row_major) return detail::eigen_gemm<T, R, R>(a, b, c, ldc, m, n, k, alpha, accumulate);
  if (a.row_major) return detail::eigen_gemm<T, R, C>(a, b, c, ldc, m, n, k, alpha, accumulate);
  if (b.row_major) return detail::eigen_gemm<T, C, R>(a, b, c, ldc, m, n, k, alpha, accumulate);
  return detail::eigen_gemm<T, C, C>(a, b, c, ldc, m, n, k, alpha, accumulate);
}

}  // namespace loom::cpu
