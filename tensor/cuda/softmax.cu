// CUDA softmax and log-softmax along one dim, forward and backward.
//
// Rows (the softmax dim is the last one) are read once and written once:
//  - up to 1024 elements, a warp holds a row in registers (up to 32 values
//    per lane) and reduces it with shuffles, four rows per block;
//  - up to 16384 (8192 backward), a 512-thread block holds the row (up to
//    32 values per thread, loaded as float4 / 2 x double2 when aligned) and
//    reduces through shared memory;
//  - longer rows are read three times by a block (max, sum, write).
// When the softmax dim is not the last, each thread walks one column
// (neighbouring threads read neighbouring addresses).
// The formulas are the CPU's, on s x for a scale s > 0 (SoftmaxParams):
// y = exp(s x - max) / sum, log y = s x - max - log(sum); dx = s y (dy - sum(dy y))
// and, for log-softmax, dx = s (dy - exp(y) sum(dy)). A causal softmax (row r
// is query r % T of a (..., T, T) tensor) treats the elements past position
// r % T as -inf. They output 0 and get gradient 0, their dy left out of the
// row's sum, as on the CPU: written as 0, not computed to be 0, so that a NaN
// or an inf elsewhere in the row (a NaN sum) does not reach them.
// Kernels take a storage type S and compute in T: 16-bit floats are read
// into float registers and rounded once when written (half.cuh).
#include <cstdint>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/cuda/row_reduce.cuh"
#include "tensor/cuda/softmax_layout.h"

namespace loom::cuda {
namespace {

constexpr int kWarpRowsBlock = 128;

// Loads row elements into v[ELEMS]: element j*GROUP + lane, or with `vec`,
// elements 4 (g*GROUP + lane) + [0, 4) into v[4g, 4g+4). Missing ones get `pad`.
template <typename S, typename T, int GROUP, int ELEMS>
__device__ __forceinline__ void load_row(const S* row, int size, int lane, bool vec, T pad, T (&v)[ELEMS]) {
  if constexpr (ELEMS >= 4) {
    if (vec) {
#pragma unroll
      for (int g = 0; g < ELEMS / 4; ++g) {
        const int index = (g * GROUP + lane) * 4;
        Vec<S> q = splat(narrow_to<S>(pad));  // -inf or 0: exact in every S
        if (index < size) q = *reinterpret_cast<const Vec<S>*>(row + index);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[g * 4 + j] = widen(q.v[j]);
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) {
    const int index = j * GROUP + lane;
    v[j] = index < size ? widen(row[index]) : pad;
  }
}

template <typename S, typename T, int GROUP, int ELEMS>
__device__ __forceinline__ void store_row(S* row, int size, int lane, bool vec, const T (&v)[ELEMS]) {
  if constexpr (ELEMS >= 4) {
    if (vec) {
#pragma unroll
      for (int g = 0; g < ELEMS / 4; ++g) {
        const int index = (g * GROUP + lane) * 4;
        if (index >= size) continue;
        Vec<S> q;
#pragma unroll
        for (int j = 0; j < 4; ++j) q.v[j] = narrow_to<S>(v[g * 4 + j]);
        *reinterpret_cast<Vec<S>*>(row + index) = q;
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) {
    const int index = j * GROUP + lane;
    if (index < size) row[index] = narrow_to<S>(v[j]);
  }
}

// The row position of register j of `lane`, as load_row lays them out.
template <int GROUP>
__device__ __forceinline__ int row_position(int j, int lane, bool vec) {
  return vec ? ((j / 4) * GROUP + lane) * 4 + j % 4 : j * GROUP + lane;
}

template <int GROUP>
constexpr int block_threads() {
  return GROUP == 32 ? kWarpRowsBlock : GROUP;
}

// One row per GROUP threads, held in registers.
template <typename S, typename T, int GROUP, int ELEMS>
__global__ void __launch_bounds__(block_threads<GROUP>())
    softmax_rows(const S* x, S* y, int64_t rows, int size, bool log, T scale, bool causal, bool vec) {
  constexpr int kRowsPerBlock = block_threads<GROUP>() / GROUP;
  __shared__ T scratch[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;  // whole warps only (GROUP == 32); a block row always exists
  T v[ELEMS];
  load_row<S, T, GROUP, ELEMS>(x + row * size, size, lane, vec, -math::infinity<T>(), v);
  const int last = causal ? static_cast<int>(row % size) : size - 1;  // past it: -inf, as the padding
  auto seen = [&](int j) { return row_position<GROUP>(j, lane, vec && ELEMS >= 4) <= last; };
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) v[j] = seen(j) ? v[j] * scale : -math::infinity<T>();
  T max = -math::infinity<T>();
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) max = Max<T>()(max, v[j]);
  max = row_allreduce<GROUP>(max, Max<T>(), scratch);
  T sum = 0;
  if (log) {
#pragma unroll
    for (int j = 0; j < ELEMS; ++j) {
      v[j] -= max;
      sum += math::exp(v[j]);  // padding: exp(-inf) = 0
    }
  } else {
#pragma unroll
    for (int j = 0; j < ELEMS; ++j) {
      v[j] = math::exp(v[j] - max);
      sum += v[j];
    }
  }
  sum = row_allreduce<GROUP>(sum, Plus<T>(), scratch);
  if (log) {
    const T log_sum = math::log(sum);
#pragma unroll
    for (int j = 0; j < ELEMS; ++j) v[j] -= log_sum;
  } else {  // masked: 0, where 0 / sum would be NaN with the sum
#pragma unroll
    for (int j = 0; j < ELEMS; ++j) v[j] = seen(j) ? v[j] / sum : T(0);
  }
  store_row<S, T, GROUP, ELEMS>(y + row * size, size, lane, vec, v);
}

template <typename S, typename T, int GROUP, int ELEMS>
__global__ void __launch_bounds__(block_threads<GROUP>())
    softmax_backward_rows(const S* y, const S* dy, S* dx, int64_t rows, int size, bool log, T scale, bool causal,
                          bool vec) {
  constexpr int kRowsPerBlock = block_threads<GROUP>() / GROUP;
  __shared__ T scratch[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;
  T vy[ELEMS], vdy[ELEMS];
  load_row<S, T, GROUP, ELEMS>(y + row * size, size, lane, vec, T(0), vy);
  load_row<S, T, GROUP, ELEMS>(dy + row * size, size, lane, vec, T(0), vdy);
  const int last = causal ? static_cast<int>(row % size) : size - 1;  // past it: left out, dx 0
  auto seen = [&](int j) { return row_position<GROUP>(j, lane, vec && ELEMS >= 4) <= last; };
  T dot = 0;
#pragma unroll
  for (int j = 0; j < ELEMS; ++j)
    if (seen(j)) dot += log ? vdy[j] : vdy[j] * vy[j];
  dot = row_allreduce<GROUP>(dot, Plus<T>(), scratch);
#pragma unroll
  for (int j = 0; j < ELEMS; ++j)
    vdy[j] = seen(j) ? scale * (log ? vdy[j] - math::exp(vy[j]) * dot : vy[j] * (vdy[j] - dot)) : T(0);
  store_row<S, T, GROUP, ELEMS>(dx + row * size, size, lane, vec, vdy);
}

// Rows too long for registers: a block reads its row three times.
template <typename S, typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_long_rows(const S* x, S* y, int64_t size, bool log, T scale, bool causal) {
  __shared__ T scratch[kMaxWarps];
  const S* in = x + static_cast<int64_t>(blockIdx.x) * size;
  S* out = y + static_cast<int64_t>(blockIdx.x) * size;
  const int64_t seen = causal ? blockIdx.x % size + 1 : size;
  T max = -math::infinity<T>();
  for (int64_t j = threadIdx.x; j < seen; j += kRowBlock) max = Max<T>()(max, widen(in[j]) * scale);
  max = row_allreduce<kRowBlock>(max, Max<T>(), scratch);
  T sum = 0;
  for (int64_t j = threadIdx.x; j < seen; j += kRowBlock) sum += math::exp(widen(in[j]) * scale - max);
  sum = row_allreduce<kRowBlock>(sum, Plus<T>(), scratch);
  const T log_sum = math::log(sum);
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock) {
    const T v = widen(in[j]) * scale - max;
    out[j] = j < seen ? narrow_to<S>(log ? v - log_sum : math::exp(v) / sum) : narrow_to<S>(T(0));
  }
}

template <typename S, typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_backward_long_rows(const S* y, const S* dy, S* dx, int64_t size, bool log, T scale, bool causal) {
  __shared__ T scratch[kMaxWarps];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * size;
  const int64_t seen = causal ? blockIdx.x % size + 1 : size;
  T dot = 0;
  for (int64_t j = threadIdx.x; j < seen; j += kRowBlock)
    dot += log ? widen(dy[base + j]) : widen(dy[base + j]) * widen(y[base + j]);
  dot = row_allreduce<kRowBlock>(dot, Plus<T>(), scratch);
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock) {
    const int64_t k = base + j;
    const T yk = widen(y[k]), dyk = widen(dy[k]);
    dx[k] = j < seen ? narrow_to<S>(scale * (log ? dyk - math::exp(yk) * dot : yk * (dyk - dot))) : narrow_to<S>(T(0));
  }
}

// The softmax dim is not the last: thread per (outer, inner) column.
template <typename S, typename T>
__global__ void softmax_columns(const S* x, S* y, int64_t outer, int64_t size, int64_t inner, bool log, T scale) {
  const int64_t columns = outer * inner;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += threads) {
    const int64_t base = (c / inner) * size * inner + c % inner;
    T max = -math::infinity<T>();
    for (int64_t j = 0; j < size; ++j) max = Max<T>()(max, widen(x[base + j * inner]) * scale);
    T sum = 0;
    for (int64_t j = 0; j < size; ++j) sum += math::exp(widen(x[base + j * inner]) * scale - max);
    const T log_sum = math::log(sum);
    for (int64_t j = 0; j < size; ++j) {
      const T v = widen(x[base + j * inner]) * scale - max;
      y[base + j * inner] = narrow_to<S>(log ? v - log_sum : math::exp(v) / sum);
    }
  }
}

template <typename S, typename T>
__global__ void softmax_backward_columns(const S* y, const S* dy, S* dx, int64_t outer, int64_t size,
                                         int64_t inner, bool log, T scale) {
  const int64_t columns = outer * inner;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += threads) {
    const int64_t base = (c / inner) * size * inner + c % inner;
    T dot = 0;
    for (int64_t j = 0; j < size; ++j) {
      const int64_t k = base + j * inner;
      dot += log ? widen(dy[k]) : widen(dy[k]) * widen(y[k]);
    }
    for (int64_t j = 0; j < size; ++j) {
      const int64_t k = base + j * inner;
      const T yk = widen(y[k]), dyk = widen(dy[k]);
      dx[k] = narrow_to<S>(scale * (log ? dyk - math::exp(yk) * dot : yk * (dyk - dot)));
    }
  }
}

// (outer, size, inner) of a contiguous tensor around `dim`.
struct RowShape {
  int64_t outer = 1, size = 1, inner = 1;
};

RowShape row_shape(const Tensor& t, int dim) {
  RowShape s;
  for (int d = 0; d < dim; ++d) s.outer *= t.size(d);
  if (t.dim() > 0) s.size = t.size(dim);
  for (int d = dim + 1; d < t.dim(); ++d) s.inner *= t.size(d);
  return s;
}

// Whether rows of `size` starting at each pointer can be moved 4 elements at a time.
template <typename T>
bool vector_rows(int64_t size, std::initializer_list<const void*> pointers) {
  if (size % 4 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % (4 * sizeof(T)) != 0) return false;
  return true;
}

}  // namespace

void CudaBackend::softmax(const Tensor& a, int dim, const SoftmaxParams& p, const Tensor& out) {
  if (out.numel() == 0) return;
  const bool log = p.log;
  dispatch_floating_or_16bit(a.dtype(), "softmax", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LaunchContext ctx(out);
    const RowShape s = row_shape(a, dim);
    LOOM_INTERNAL_ASSERT(!p.causal || (s.inner == 1 && !log && a.dim() >= 2 && a.size(-2) == s.size),
                         "causal softmax needs the last dim of a (..., T, T) tensor, got dim ", dim, " of ", a.shape());
    const T scale = T(p.scale);
    const S* x = static_cast<const S*>(a.raw_data());
    S* y = static_cast<S*>(out.raw_data());
    if (s.inner > 1) {
      softmax_columns<S, T><<<ctx.grid(s.outer * s.inner), kBlockSize, 0, ctx.stream>>>(x, y, s.outer, s.size,
                                                                                     s.inner, log, scale);
    } else if (s.size > kMaxBlockRow) {
      LOOM_CHECK(s.outer < (int64_t{1} << 31), "softmax: too many rows (", s.outer, ")");
      softmax_long_rows<S, T><<<static_cast<unsigned>(s.outer), kRowBlock, 0, ctx.stream>>>(x, y, s.size, log,
                                                                                            scale, p.causal);
    } else {
      const bool vec = vector_rows<S>(s.size, {x, y});
      with_row_config(s.size, [&](auto group, auto elems) {
        constexpr int G = decltype(group)::value, E = decltype(elems)::value;
        constexpr int rows_per_block = block_threads<G>() / G;
        const int64_t blocks = ceil_div(s.outer, rows_per_block);
        LOOM_CHECK(blocks < (int64_t{1} << 31), "softmax: too many rows (", s.outer, ")");
        softmax_rows<S, T, G, E><<<static_cast<unsigned>(blocks), block_threads<G>(), 0, ctx.stream>>>(
            x, y, s.outer, static_cast<int>(s.size), log, scale, p.causal, vec && E >= 4);
      });
    }
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::softmax_backward(const Tensor& y_t, const Tensor& dy_t, int dim, const SoftmaxParams& p,
                                   const Tensor& dx_t) {
  if (dx_t.numel() == 0) return;
  const bool log = p.log;
  dispatch_floating_or_16bit(y_t.dtype(), "softmax_backward", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LaunchContext ctx(dx_t);
    const RowShape s = row_shape(y_t, dim);
    LOOM_INTERNAL_ASSERT(!p.causal || (s.inner == 1 && !log && y_t.dim() >= 2 && y_t.size(-2) == s.size),
                         "causal softmax_backward needs the last dim of a (..., T, T) tensor, got dim ", dim, " of ",
                         y_t.shape());
    const T scale = T(p.scale);
    const S* y = static_cast<const S*>(y_t.raw_data());
    const S* dy = static_cast<const S*>(dy_t.raw_data());
    S* dx = static_cast<S*>(dx_t.raw_data());
    if (s.inner > 1) {
      softmax_backward_columns<S, T><<<ctx.grid(s.outer * s.inner), kBlockSize, 0, ctx.stream>>>(
          y, dy, dx, s.outer, s.size, s.inner, log, scale);
    } else if (s.size > kMaxBlockRowBackward) {
      LOOM_CHECK(s.outer < (int64_t{1} << 31), "softmax_backward: too many rows (", s.outer, ")");
      softmax_backward_long_rows<S, T><<<static_cast<unsigned>(s.outer), kRowBlock, 0, ctx.stream>>>(
          y, dy, dx, s.size, log, scale, p.causal);
    } else {
      const bool vec = vector_rows<S>(s.size, {y, dy, dx});
      with_backward_row_config(s.size, [&](auto group, auto elems) {
        constexpr int G = decltype(group)::value, E = decltype(elems)::value;
        constexpr int rows_per_block = block_threads<G>() / G;
        const int64_t blocks = ceil_div(s.outer, rows_per_block);
        LOOM_CHECK(blocks < (int64_t{1} << 31), "softmax_backward: too many rows (", s.outer, ")");
        softmax_backward_rows<S, T, G, E><<<static_cast<unsigned>(blocks), block_threads<G>(), 0, ctx.stream>>>(
            y, dy, dx, s.outer, static_cast<int>(s.size), log, scale, p.causal, vec && E >= 4);
      });
    }
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

}  // namespace loom::cuda
