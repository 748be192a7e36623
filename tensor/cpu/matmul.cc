// CPU batched matmul on Eigen's GEMM (tensor/cpu/gemm.h: its AVX-512 build
// where the processor has AVX-512; multithreaded through OpenMP), or, for
// float32 shapes where it measured faster, on loom's packed AVX2 kernel
// (runs_packed below).
//
// Operands are mapped in place whenever one of their two strides is 1, so a
// transposed view (x.t()) costs no copy: it is read as a column-major matrix.
// A bias is written into every row of the output first and the GEMM adds its
// product to it (beta = 1), while the output's blocks are in cache, instead
// of a separate pass over the output afterwards.
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

// float32 products go to the packed AVX2 kernel (tensor/cpu/packed_gemm.h)
// instead of Eigen's GEMM where it measured faster (docs/benchmarks.md): a
// right operand of at least one 16-column panel and at most 1 MB, packed
// once into panels that stay near the core, and a left operand read in
// place (row-major) or 6 rows at a time (column-major), where Eigen packs
// all of it. On the transformers' Linear layers (the forward x W^T, the
// input gradient dy W, the weight gradient dy^T x): 86-97% of the core's
// FMA peak against Eigen's 75-87%. Processors with AVX-512 keep Eigen's
// AVX-512 build, which beats it there.
constexpr int64_t kPackedMinRows = 16;
constexpr int64_t kPackedMinColumns = 16;
constexpr int64_t kPackedMaxRightOperand = int64_t{1} << 18;  // elements

bool runs_packed(int64_t m, int64_t n, int64_t k) {
  return m >= kPackedMinRows && n >= kPackedMinColumns && k > 0 && k * n <= kPackedMaxRightOperand &&
         !avx512_gemm_enabled();
}

// c (m x n) = a B (+ bias in every row): B packed once, row tiles on threads.
// Each element is the same chain of fused multiply-adds whichever thread
// runs its row, so the bits do not depend on the thread count.
void packed_product(const GemmOperand<float>& a, const GemmOperand<float>& b, const float* bias, float* c, int64_t m,
                    int64_t n, int64_t k) {
  const PackedMatrix packed(b, k, n);
  constexpr int64_t kTile = 6;  // the kernel's row tile
  const int64_t tiles = (m + kTile - 1) / kTile;
  const int64_t tiles_per_grain = std::max<int64_t>(1, (int64_t{1} << 18) / (kTile * n * k));
  const int64_t row_step = a.row_major ? a.ld : 1;
  parallel_for(tiles, tiles_per_grain, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kTile, rows = std::min(m, end * kTile) - first;
    packed.multiply({a.data + first * row_step, a.ld, a.row_major}, rows, c + first * n, n, bias);
  });
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
      if constexpr (std::is_same_v<T, float>) {
        if (runs_packed(m, n, k)) return packed_product(left, right, pbias, pc + i * m * n, m, n, k);
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
