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
// The formulas are the CPU's: y = exp(x - max) / sum, log y = x - max - log(sum);
// dx = y (dy - sum(dy y)) and, for log-softmax, dx = dy - exp(y) sum(dy).
#include <cstdint>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/loops.cuh"
#include "tensor/cuda/row_reduce.cuh"

namespace loom::cuda {
namespace {

constexpr int kRowBlock = 512;  // threads of the block-per-row kernels
constexpr int kWarpRowsBlock = 128;

// Loads row elements into v[ELEMS]: element j*GROUP + lane, or with `vec`,
// elements 4 (g*GROUP + lane) + [0, 4) into v[4g, 4g+4). Missing ones get `pad`.
template <typename T, int GROUP, int ELEMS>
__device__ __forceinline__ void load_row(const T* row, int size, int lane, bool vec, T pad, T (&v)[ELEMS]) {
  if constexpr (ELEMS >= 4) {
    if (vec) {
#pragma unroll
      for (int g = 0; g < ELEMS / 4; ++g) {
        const int index = (g * GROUP + lane) * 4;
        Vec<T> q = splat(pad);
        if (index < size) q = *reinterpret_cast<const Vec<T>*>(row + index);
#pragma unroll
        for (int j = 0; j < 4; ++j) v[g * 4 + j] = q.v[j];
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) {
    const int index = j * GROUP + lane;
    v[j] = index < size ? row[index] : pad;
  }
}

template <typename T, int GROUP, int ELEMS>
__device__ __forceinline__ void store_row(T* row, int size, int lane, bool vec, const T (&v)[ELEMS]) {
  if constexpr (ELEMS >= 4) {
    if (vec) {
#pragma unroll
      for (int g = 0; g < ELEMS / 4; ++g) {
        const int index = (g * GROUP + lane) * 4;
        if (index >= size) continue;
        Vec<T> q;
#pragma unroll
        for (int j = 0; j < 4; ++j) q.v[j] = v[g * 4 + j];
        *reinterpret_cast<Vec<T>*>(row + index) = q;
      }
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) {
    const int index = j * GROUP + lane;
    if (index < size) row[index] = v[j];
  }
}

template <int GROUP>
constexpr int block_threads() {
  return GROUP == 32 ? kWarpRowsBlock : GROUP;
}

// One row per GROUP threads, held in registers.
template <typename T, int GROUP, int ELEMS>
__global__ void __launch_bounds__(block_threads<GROUP>())
    softmax_rows(const T* x, T* y, int64_t rows, int size, bool log, bool vec) {
  constexpr int kRowsPerBlock = block_threads<GROUP>() / GROUP;
  __shared__ T scratch[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;  // whole warps only (GROUP == 32); a block row always exists
  T v[ELEMS];
  load_row<T, GROUP, ELEMS>(x + row * size, size, lane, vec, -math::infinity<T>(), v);
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
  } else {
#pragma unroll
    for (int j = 0; j < ELEMS; ++j) v[j] /= sum;
  }
  store_row<T, GROUP, ELEMS>(y + row * size, size, lane, vec, v);
}

template <typename T, int GROUP, int ELEMS>
__global__ void __launch_bounds__(block_threads<GROUP>())
    softmax_backward_rows(const T* y, const T* dy, T* dx, int64_t rows, int size, bool log, bool vec) {
  constexpr int kRowsPerBlock = block_threads<GROUP>() / GROUP;
  __shared__ T scratch[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;
  T vy[ELEMS], vdy[ELEMS];
  load_row<T, GROUP, ELEMS>(y + row * size, size, lane, vec, T(0), vy);
  load_row<T, GROUP, ELEMS>(dy + row * size, size, lane, vec, T(0), vdy);
  T dot = 0;
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) dot += log ? vdy[j] : vdy[j] * vy[j];
  dot = row_allreduce<GROUP>(dot, Plus<T>(), scratch);
#pragma unroll
  for (int j = 0; j < ELEMS; ++j) vdy[j] = log ? vdy[j] - math::exp(vy[j]) * dot : vy[j] * (vdy[j] - dot);
  store_row<T, GROUP, ELEMS>(dx + row * size, size, lane, vec, vdy);
}

// Rows too long for registers: a block reads its row three times.
template <typename T>
__global__ void __launch_bounds__(kRowBlock) softmax_long_rows(const T* x, T* y, int64_t size, bool log) {
  __shared__ T scratch[kMaxWarps];
  const T* in = x + static_cast<int64_t>(blockIdx.x) * size;
  T* out = y + static_cast<int64_t>(blockIdx.x) * size;
  T max = -math::infinity<T>();
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock) max = Max<T>()(max, in[j]);
  max = row_allreduce<kRowBlock>(max, Max<T>(), scratch);
  T sum = 0;
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock) sum += math::exp(in[j] - max);
  sum = row_allreduce<kRowBlock>(sum, Plus<T>(), scratch);
  const T log_sum = math::log(sum);
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock)
    out[j] = log ? in[j] - max - log_sum : math::exp(in[j] - max) / sum;
}

template <typename T>
__global__ void __launch_bounds__(kRowBlock)
    softmax_backward_long_rows(const T* y, const T* dy, T* dx, int64_t size, bool log) {
  __shared__ T scratch[kMaxWarps];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * size;
  T dot = 0;
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock) dot += log ? dy[base + j] : dy[base + j] * y[base + j];
  dot = row_allreduce<kRowBlock>(dot, Plus<T>(), scratch);
  for (int64_t j = threadIdx.x; j < size; j += kRowBlock) {
    const int64_t k = base + j;
    dx[k] = log ? dy[k] - math::exp(y[k]) * dot : y[k] * (dy[k] - dot);
  }
}

// The softmax dim is not the last: thread per (outer, inner) column.
template <typename T>
__global__ void softmax_columns(const T* x, T* y, int64_t outer, int64_t size, int64_t inner, bool log) {
  const int64_t columns = outer * inner;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += threads) {
    const int64_t base = (c / inner) * size * inner + c % inner;
    T max = -math::infinity<T>();
    for (int64_t j = 0; j < size; ++j) max = Max<T>()(max, x[base + j * inner]);
    T sum = 0;
    for (int64_t j = 0; j < size; ++j) sum += math::exp(x[base + j * inner] - max);
    const T log_sum = math::log(sum);
    for (int64_t j = 0; j < size; ++j) {
      const T v = x[base + j * inner] - max;
      y[base + j * inner] = log ? v - log_sum : math::exp(v) / sum;
    }
  }
}

template <typename T>
__global__ void softmax_backward_columns(const T* y, const T* dy, T* dx, int64_t outer, int64_t size,
                                         int64_t inner, bool log) {
  const int64_t columns = outer * inner;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += threads) {
    const int64_t base = (c / inner) * size * inner + c % inner;
    T dot = 0;
    for (int64_t j = 0; j < size; ++j) {
      const int64_t k = base + j * inner;
      dot += log ? dy[k] : dy[k] * y[k];
    }
    for (int64_t j = 0; j < size; ++j) {
      const int64_t k = base + j * inner;
      dx[k] = log ? dy[k] - math::exp(y[k]) * dot : y[k] * (dy[k] - dot);
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

constexpr int kMaxWarpRow = 32 * 32;  // elements a warp keeps in registers
// Elements a block keeps in registers: 32 per thread forward; the backward
// holds two arrays, and 2 x 32 doubles would spill, so it stops at 16.
constexpr int kMaxBlockRow = kRowBlock * 32;
constexpr int kMaxBlockRowBackward = kRowBlock * 16;

// Calls launch(GROUP, ELEMS) with the register layout for rows of `size`
// (at most kMaxBlockRow).
template <typename Launch>
void with_row_config(int64_t size, Launch&& launch) {
  using std::integral_constant;
  if (size <= kMaxWarpRow) {
    const int64_t per_lane = ceil_div(size, 32);
    if (per_lane <= 1) return launch(integral_constant<int, 32>(), integral_constant<int, 1>());
    if (per_lane <= 2) return launch(integral_constant<int, 32>(), integral_constant<int, 2>());
    if (per_lane <= 4) return launch(integral_constant<int, 32>(), integral_constant<int, 4>());
    if (per_lane <= 8) return launch(integral_constant<int, 32>(), integral_constant<int, 8>());
    if (per_lane <= 16) return launch(integral_constant<int, 32>(), integral_constant<int, 16>());
    return launch(integral_constant<int, 32>(), integral_constant<int, 32>());
  }
  const int64_t per_thread = ceil_div(size, kRowBlock);
  if (per_thread <= 4) return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 4>());
  if (per_thread <= 8) return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 8>());
  if (per_thread <= 16) return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 16>());
  return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 32>());
}

// The same, for rows of at most kMaxBlockRowBackward (no 32-per-thread kernel).
template <typename Launch>
void with_backward_row_config(int64_t size, Launch&& launch) {
  with_row_config(size, [&](auto group, auto elems) {
    if constexpr (decltype(elems)::value <= 16) launch(group, elems);
  });
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

void CudaBackend::softmax(const Tensor& a, int dim, bool log, const Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_floating(a.dtype(), "softmax", [&](auto tag) {
    using T = decltype(tag);
    LaunchContext ctx(out);
    const RowShape s = row_shape(a, dim);
    const T* x = a.data_ptr<T>();
    T* y = out.data_ptr<T>();
    if (s.inner > 1) {
      softmax_columns<T><<<ctx.grid(s.outer * s.inner), kBlockSize, 0, ctx.stream>>>(x, y, s.outer, s.size,
                                                                                     s.inner, log);
    } else if (s.size > kMaxBlockRow) {
      LOOM_CHECK(s.outer < (int64_t{1} << 31), "softmax: too many rows (", s.outer, ")");
      softmax_long_rows<T><<<static_cast<unsigned>(s.outer), kRowBlock, 0, ctx.stream>>>(x, y, s.size, log);
    } else {
      const bool vec = vector_rows<T>(s.size, {x, y});
      with_row_config(s.size, [&](auto group, auto elems) {
        constexpr int G = decltype(group)::value, E = decltype(elems)::value;
        constexpr int rows_per_block = block_threads<G>() / G;
        const int64_t blocks = ceil_div(s.outer, rows_per_block);
        LOOM_CHECK(blocks < (int64_t{1} << 31), "softmax: too many rows (", s.outer, ")");
        softmax_rows<T, G, E><<<static_cast<unsigned>(blocks), block_threads<G>(), 0, ctx.stream>>>(
            x, y, s.outer, static_cast<int>(s.size), log, vec && E >= 4);
      });
    }
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::softmax_backward(const Tensor& y_t, const Tensor& dy_t, int dim, bool log,
                                   const Tensor& dx_t) {
  if (dx_t.numel() == 0) return;
  dispatch_floating(y_t.dtype(), "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    LaunchContext ctx(dx_t);
    const RowShape s = row_shape(y_t, dim);
    const T* y = y_t.data_ptr<T>();
    const T* dy = dy_t.data_ptr<T>();
    T* dx = dx_t.data_ptr<T>();
    if (s.inner > 1) {
      softmax_backward_columns<T><<<ctx.grid(s.outer * s.inner), kBlockSize, 0, ctx.stream>>>(
          y, dy, dx, s.outer, s.size, s.inner, log);
    } else if (s.size > kMaxBlockRowBackward) {
      LOOM_CHECK(s.outer < (int64_t{1} << 31), "softmax_backward: too many rows (", s.outer, ")");
      softmax_backward_long_rows<T><<<static_cast<unsigned>(s.outer), kRowBlock, 0, ctx.stream>>>(
          y, dy, dx, s.size, log);
    } else {
      const bool vec = vector_rows<T>(s.size, {y, dy, dx});
      with_backward_row_config(s.size, [&](auto group, auto elems) {
        constexpr int G = decltype(group)::value, E = decltype(elems)::value;
        constexpr int rows_per_block = block_threads<G>() / G;
        const int64_t blocks = ceil_div(s.outer, rows_per_block);
        LOOM_CHECK(blocks < (int64_t{1} << 31), "softmax_backward: too many rows (", s.outer, ")");
        softmax_backward_rows<T, G, E><<<static_cast<unsigned>(blocks), block_threads<G>(), 0, ctx.stream>>>(
            y, dy, dx, s.outer, static_cast<int>(s.size), log, vec && E >= 4);
      });
    }
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

}  // namespace loom::cuda
