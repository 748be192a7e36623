// CUDA layer norm over the last dim of a contiguous (rows, C) tensor.
//
// Forward and the dx part of backward: a warp per row up to C = 1024 (four
// rows per block), a 256-thread block per row above. Each row is read from
// memory once; the second and third passes hit the cache. Statistics
// accumulate in double, as on the CPU (the variance is a difference of
// large terms).
// dweight and dbias are sums over rows: 32 x 8 thread blocks, threads along
// the columns (coalesced), the rows split over blocks whose double partial
// sums a second kernel adds up when there are many rows.
// Kernels take a storage type S and compute in T: 16-bit floats are widened
// to float on load and rounded once on store (half.cuh), as the CPU does.
#include <algorithm>
#include <cstdint>

#include "tensor/creation.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/row_reduce.cuh"

namespace loom::cuda {
namespace {

constexpr int kWideRow = 256;  // threads per row above 1024 columns

template <int GROUP>
constexpr int row_block() {
  return GROUP == 32 ? 128 : GROUP;
}

template <typename S, typename T, int GROUP>
__global__ void __launch_bounds__(row_block<GROUP>())
    layer_norm_kernel(const S* x, const S* weight, const S* bias, double eps, S* y, T* mean, T* rstd,
                      int64_t rows, int64_t cols) {
  __shared__ double scratch[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (row_block<GROUP>() / GROUP) + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;  // whole warps only; a block row always exists
  const S* xr = x + row * cols;
  double sum = 0;
  for (int64_t c = lane; c < cols; c += GROUP) sum += widen(xr[c]);
  sum = row_allreduce<GROUP>(sum, Plus<double>(), scratch);
  const double mu = sum / cols;
  double sum_sq = 0;
  for (int64_t c = lane; c < cols; c += GROUP) {
    const double d = widen(xr[c]) - mu;
    sum_sq += d * d;
  }
  sum_sq = row_allreduce<GROUP>(sum_sq, Plus<double>(), scratch);
  const T inv = T(1.0 / ::sqrt(sum_sq / cols + eps));
  const T mu_t = T(mu);
  if (lane == 0) {
    mean[row] = mu_t;
    rstd[row] = inv;
  }
  S* yr = y + row * cols;
  for (int64_t c = lane; c < cols; c += GROUP) {
    const T v = (widen(xr[c]) - mu_t) * inv;
    yr[c] = narrow_to<S>((weight ? v * widen(weight[c]) : v) + (bias ? widen(bias[c]) : T(0)));
  }
}

// dx = rstd (g - mean(g) - xhat mean(g xhat)), with g = dy * weight.
template <typename S, typename T, int GROUP>
__global__ void __launch_bounds__(row_block<GROUP>())
    layer_norm_dx_kernel(const S* dy, const S* x, const S* weight, const T* mean, const T* rstd, S* dx,
                         int64_t rows, int64_t cols) {
  __shared__ double scratch[kMaxWarps];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (row_block<GROUP>() / GROUP) + threadIdx.x / GROUP;
  const int lane = threadIdx.x % GROUP;
  if (row >= rows) return;
  const S* xr = x + row * cols;
  const S* dyr = dy + row * cols;
  const T mu = mean[row], inv = rstd[row];
  double g_sum = 0, gx_sum = 0;
  for (int64_t c = lane; c < cols; c += GROUP) {
    const T xhat = (widen(xr[c]) - mu) * inv;
    const T g = weight ? widen(dyr[c]) * widen(weight[c]) : widen(dyr[c]);
    g_sum += g;
    gx_sum += g * xhat;
  }
  g_sum = row_allreduce<GROUP>(g_sum, Plus<double>(), scratch);
  gx_sum = row_allreduce<GROUP>(gx_sum, Plus<double>(), scratch);
  const T g_mean = T(g_sum / cols), gx_mean = T(gx_sum / cols);
  S* dxr = dx + row * cols;
  for (int64_t c = lane; c < cols; c += GROUP) {
    const T xhat = (widen(xr[c]) - mu) * inv;
    const T g = weight ? widen(dyr[c]) * widen(weight[c]) : widen(dyr[c]);
    dxr[c] = narrow_to<S>(inv * (g - g_mean - xhat * gx_mean));
  }
}

// Column sums of dy * xhat (dweight) and dy (dbias) over a chunk of rows.
template <typename S, typename T>
__global__ void __launch_bounds__(256)
    layer_norm_params_kernel(const S* dy, const S* x, const T* mean, const T* rstd, S* dweight, S* dbias,
                             double* partial, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  __shared__ double sums[2][8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  double dw = 0, db = 0;
  if (c < cols) {
    for (int64_t r = begin + threadIdx.y; r < end; r += 8) {
      const T g = widen(dy[r * cols + c]);
      const T xhat = (widen(x[r * cols + c]) - mean[r]) * rstd[r];
      dw += g * xhat;
      db += g;
    }
  }
  sums[0][threadIdx.y][threadIdx.x] = dw;
  sums[1][threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  for (int k = 1; k < 8; ++k) {
    dw += sums[0][k][threadIdx.x];
    db += sums[1][k][threadIdx.x];
  }
  if (gridDim.y == 1) {
    if (dweight) dweight[c] = narrow_to<S>(T(dw));
    if (dbias) dbias[c] = narrow_to<S>(T(db));
  } else {
    partial[(2 * static_cast<int64_t>(blockIdx.y)) * cols + c] = dw;
    partial[(2 * static_cast<int64_t>(blockIdx.y) + 1) * cols + c] = db;
  }
}

template <typename S, typename T>
__global__ void layer_norm_params_finish(const double* partial, S* dweight, S* dbias, int64_t cols, int64_t chunks) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double dw = 0, db = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    dw += partial[(2 * k) * cols + c];
    db += partial[(2 * k + 1) * cols + c];
  }
  if (dweight) dweight[c] = narrow_to<S>(T(dw));
  if (dbias) dbias[c] = narrow_to<S>(T(db));
}

// Calls launch(GROUP) with the row width that suits `cols`.
template <typename Launch>
void with_row_group(int64_t cols, Launch&& launch) {
  if (cols <= 1024)
    launch(std::integral_constant<int, 32>());
  else
    launch(std::integral_constant<int, kWideRow>());
}

// Layer norm's saved mean and rstd are in the compute type (float32 for 16-bit x).
template <typename T>
void check_statistics(const Tensor& mean, const Tensor& rstd) {
  LOOM_INTERNAL_ASSERT(mean.dtype() == storage_dtype<T>() && rstd.dtype() == storage_dtype<T>(),
                       "layer norm statistics must be ", storage_dtype<T>(), ", got ", mean.dtype());
}

}  // namespace

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                             const Tensor& mean, const Tensor& rstd) {
  if (x.numel() == 0) return;
  dispatch_floating_or_16bit(x.dtype(), "layer_norm", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LaunchContext ctx(x);
    check_statistics<T>(mean, rstd);
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    with_row_group(cols, [&](auto group) {
      constexpr int G = decltype(group)::value;
      const int64_t blocks = ceil_div(rows, row_block<G>() / G);
      layer_norm_kernel<S, T, G><<<static_cast<unsigned>(blocks), row_block<G>(), 0, ctx.stream>>>(
          data_of<const S>(x), data_of<const S>(weight), data_of<const S>(bias), eps, data_of<S>(y),
          data_of<T>(mean), data_of<T>(rstd), rows, cols);
    });
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                                      const Tensor& dbias) {
  if (x.numel() == 0) {  // no rows: the parameter gradients are sums of nothing
    if (dweight.defined()) fill(dweight, 0);
    if (dbias.defined()) fill(dbias, 0);
    return;
  }
  dispatch_floating_or_16bit(x.dtype(), "layer_norm_backward", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LaunchContext ctx(x);
    check_statistics<T>(mean, rstd);
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    if (dx.defined()) {
      with_row_group(cols, [&](auto group) {
        constexpr int G = decltype(group)::value;
        const int64_t blocks = ceil_div(rows, row_block<G>() / G);
        layer_norm_dx_kernel<S, T, G><<<static_cast<unsigned>(blocks), row_block<G>(), 0, ctx.stream>>>(
            data_of<const S>(dy), data_of<const S>(x), data_of<const S>(weight), data_of<const T>(mean),
            data_of<const T>(rstd), data_of<S>(dx), rows, cols);
      });
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    }
    if (!dweight.defined() && !dbias.defined()) return;

    const int64_t column_blocks = ceil_div(cols, 32);
    const int64_t target = static_cast<int64_t>(ctx.multiprocessors) * 8;
    int64_t chunks = std::min<int64_t>({std::max<int64_t>(1, ceil_div(target, column_blocks)),
                                        std::max<int64_t>(1, ceil_div(rows, 64)), 65535});
    const int64_t rows_per_chunk = ceil_div(rows, chunks);
    chunks = ceil_div(rows, rows_per_chunk);
    Tensor scratch;
    double* partial = nullptr;
    if (chunks > 1) {
      scratch = empty({2 * chunks * cols}, {.dtype = kFloat64, .device = x.device()});
      partial = scratch.data_ptr<double>();
    }
    layer_norm_params_kernel<S, T><<<dim3(static_cast<unsigned>(column_blocks), static_cast<unsigned>(chunks)),
                                     dim3(32, 8), 0, ctx.stream>>>(
        data_of<const S>(dy), data_of<const S>(x), data_of<const T>(mean), data_of<const T>(rstd),
        data_of<S>(dweight), data_of<S>(dbias), partial, rows, cols, rows_per_chunk);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    if (chunks > 1) {
      layer_norm_params_finish<S, T><<<static_cast<unsigned>(ceil_div(cols, kBlockSize)), kBlockSize, 0,
                                       ctx.stream>>>(partial, data_of<S>(dweight), data_of<S>(dbias), cols, chunks);
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    }
  });
}

}  // namespace loom::cuda
