// CPU batched matmul on Eigen's GEMM (multithreaded through OpenMP), built
// for AVX2 and, on processors that have it, for AVX-512 (gemm_avx512.h).
//
// Operands are mapped in place whenever one of their two strides is 1, so a
// transposed view (x.t()) costs no copy: it is read as a column-major matrix.
#include <Eigen/Core>

#include <atomic>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm_avx512.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/parallel.h"
#include "tensor/creation.h"

namespace loom::cpu {
namespace {

// How a (rows x cols) strided matrix maps onto Eigen without a copy.
struct MatrixLayout {
  bool row_major = true;
  int64_t leading = 0;  // Eigen's outer stride
  bool mappable = true;
};

MatrixLayout choose_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if (cols == 1 || col_stride == 1) return {true, rows == 1 ? cols : row_stride, true};
  if (rows == 1 || row_stride == 1) return {false, col_stride, true};
  return {true, 0, false};
}

template <typename T, int Order>
using MatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>, 0,
                             Eigen::OuterStride<>>;

template <typename T, int OrderA, int OrderB>
void gemm(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t m, int64_t n, int64_t k) {
  MatrixMap<T, OrderA> A(a, m, k, Eigen::OuterStride<>(lda));
  MatrixMap<T, OrderB> B(b, k, n, Eigen::OuterStride<>(ldb));
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> C(c, m, n);
  C.noalias() = A * B;
}

std::atomic<bool> g_avx512_allowed{true};

template <typename T>
void gemm_any(const T* a, MatrixLayout la, const T* b, MatrixLayout lb, T* c, int64_t m, int64_t n,
              int64_t k) {
  if (avx512_gemm_enabled())
    return gemm_avx512(a, la.leading, la.row_major, b, lb.leading, lb.row_major, c, m, n, k);
  constexpr int R = Eigen::RowMajor, C = Eigen::ColMajor;
  if (la.row_major && lb.row_major) return gemm<T, R, R>(a, la.leading, b, lb.leading, c, m, n, k);
  if (la.row_major) return gemm<T, R, C>(a, la.leading, b, lb.leading, c, m, n, k);
  if (lb.row_major) return gemm<T, C, R>(a, la.leading, b, lb.leading, c, m, n, k);
  return gemm<T, C, C>(a, la.leading, b, lb.leading, c, m, n, k);
}

}  // namespace

bool avx512_gemm_enabled() {
  // x86-64-v4's AVX-512 subsets; libgcc also checks that the OS saves the AVX-512 registers.
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                                __builtin_cpu_supports("avx512cd");
  return supported && g_avx512_allowed.load(std::memory_order_relaxed);
}

void set_avx512_gemm(bool allowed) { g_avx512_allowed.store(allowed); }

void CpuBackend::matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& out) {
  if (run_in_float32({a_in, b_in, out}, {2}, [&](const TensorList& t) { matmul(t[0], t[1], t[2]); })) return;
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  MatrixLayout la = choose_layout(m, k, a_in.stride(1), a_in.stride(2));
  MatrixLayout lb = choose_layout(k, n, b_in.stride(1), b_in.stride(2));
  // Operands with no unit stride (rare: e.g. a slice with step) are copied.
  Tensor a = la.mappable ? a_in : contiguous_copy(a_in);
  Tensor b = lb.mappable ? b_in : contiguous_copy(b_in);
  if (!la.mappable) la = choose_layout(m, k, a.stride(1), a.stride(2));
  if (!lb.mappable) lb = choose_layout(k, n, b.stride(1), b.stride(2));

  dispatch_floating(out.dtype(), "matmul", [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.data_ptr<T>();
    const T* pb = b.data_ptr<T>();
    T* pc = out.data_ptr<T>();
    auto one = [&](int64_t i) {
      gemm_any<T>(pa + i * a.stride(0), la, pb + i * b.stride(0), lb, pc + i * m * n, m, n, k);
    };
    // Small matrices: one per thread. Large ones: Eigen threads each product.
    if (batch > 1 && m * n * k < (int64_t{1} << 18)) {
      parallel_for(batch, std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(m * n * k, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t i = begin; i < end; ++i) one(i);
                   });
    } else {
      for (int64_t i = 0; i < batch; ++i) one(i);
    }
  });
}

}  // namespace loom::cpu
