// CPU batched matmul on Eigen's GEMM (tensor/cpu/gemm.h: its AVX-512 build
// where the processor has AVX-512; multithreaded through OpenMP), or, for
// float32 shapes where it measured faster, on loom's packed AVX2 kernel
// (packed_gemm.h).
//
// Operands are mapped in place whenever one of their two strides is 1, so a
// transposed view (x.t()) costs no copy: it is read as a column-major matrix.
// A bias is written into every row of the output first and Eigen's GEMM
// adds its product to it (beta = 1), while the output's blocks are in cache,
// instead of a separate pass over the output afterwards; the packed kernel
// starts its sums from the bias.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/packed_gemm.h"
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

// Every row of the (m x n) row-major c becomes `bias`.
template <typename T>
void fill_rows(T* c, const T* bias, int64_t m, int64_t n) {
  parallel_for(m, items_per_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) std::memcpy(c + i * n, bias, sizeof(T) * n);
  });
}

}  // namespace

void CpuBackend::matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& out) {
  if (run_in_float32({a_in, b_in, bias, out}, {3}, [&](const TensorList& t) { matmul(t[0], t[1], t[2], t[3]); }))
    return;
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
    const T* pbias = bias.defined() ? bias.data_ptr<T>() : nullptr;
    auto one = [&](int64_t i) {
      const GemmOperand<T> left{pa + i * a.stride(0), la.leading, la.row_major};
      const GemmOperand<T> right{pb + i * b.stride(0), lb.leading, lb.row_major};
      // The packed kernel starts its sums from the bias (gemm.h picks it
      // where it is the faster).
      if constexpr (std::is_same_v<T, float>) {
        if (pbias != nullptr && packed_gemm_wins(m, n, k, left.row_major))
          return packed_gemm(left, right, pc + i * m * n, n, m, n, k, {pbias});
      }
      if (pbias != nullptr) fill_rows(pc + i * m * n, pbias, m, n);
      gemm<T>(left, right, pc + i * m * n, n, m, n, k, T(1), /*accumulate=*/pbias != nullptr);
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
