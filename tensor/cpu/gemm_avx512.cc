// Eigen's GEMM compiled for x86-64-v4 (AVX-512), behind gemm_avx512.h.
//
// The linker keeps one copy of each template instantiation (inline
// functions and templates are weak symbols). Had this file instantiated
// Eigen's templates under their usual names, the AVX-512 copies could have
// replaced the AVX2 ones that the rest of loom calls, and crashed on a
// processor without AVX-512. So Eigen is renamed here (the macro renames
// its namespace and every qualified use of it), the instantiations live in
// an anonymous namespace, and nothing else is included: only gemm_avx512's
// two plain functions leave this file (`nm` on its object lists no weak
// symbol outside loom_eigen_avx512). The AVX2 build is tensor/cpu/gemm.h's.
#define Eigen loom_eigen_avx512
#include <Eigen/Core>

#include "tensor/cpu/gemm_avx512.h"

namespace loom::cpu {
namespace {

template <typename T, int Order>
using OperandMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0, Eigen::OuterStride<>>;

template <typename T, int OrderA, int OrderB>
void gemm(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t m, int64_t n, int64_t k,
          T alpha, bool accumulate) {
  OperandMap<T, OrderA> A(a, m, k, Eigen::OuterStride<>(lda));
  OperandMap<T, OrderB> B(b, k, n, Eigen::OuterStride<>(ldb));
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>, 0, Eigen::OuterStride<>> C(
      c, m, n, Eigen::OuterStride<>(ldc));
  if (accumulate)
    C.noalias() += alpha * (A * B);
  else if (alpha == T(1))
    C.noalias() = A * B;
  else
    C.noalias() = alpha * (A * B);
}

template <typename T>
void gemm_any(const T* a, int64_t lda, bool a_row_major, const T* b, int64_t ldb, bool b_row_major, T* c, int64_t ldc,
              int64_t m, int64_t n, int64_t k, T alpha, bool accumulate) {
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (a_row_major && b_row_major) return gemm<T, R, R>(a, lda, b, ldb, c, ldc, m, n, k, alpha, accumulate);
  if (a_row_major) return gemm<T, R, C>(a, lda, b, ldb, c, ldc, m, n, k, alpha, accumulate);
  if (b_row_major) return gemm<T, C, R>(a, lda, b, ldb, c, ldc, m, n, k, alpha, accumulate);
  return gemm<T, C, C>(a, lda, b, ldb, c, ldc, m, n, k, alpha, accumulate);
}

}  // namespace

void gemm_avx512(const float* a, int64_t lda, bool a_row_major, const float* b, int64_t ldb, bool b_row_major,
                 float* c, int64_t ldc, int64_t m, int64_t n, int64_t k, float alpha, bool accumulate) {
  gemm_any(a, lda, a_row_major, b, ldb, b_row_major, c, ldc, m, n, k, alpha, accumulate);
}

void gemm_avx512(const double* a, int64_t lda, bool a_row_major, const double* b, int64_t ldb, bool b_row_major,
                 double* c, int64_t ldc, int64_t m, int64_t n, int64_t k, double alpha, bool accumulate) {
  gemm_any(a, lda, a_row_major, b, ldb, b_row_major, c, ldc, m, n, k, alpha, accumulate);
}

}  // namespace loom::cpu
