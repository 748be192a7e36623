// CUDA pooling over NCHW planes: max (with the flat argmax h * W + w per
// output, for the backward), average (padding counted in the divisor) and
// adaptive average. One thread per output element forward. Backward: max
// pooling and adaptive pooling add into dx with atomics (windows may overlap),
// after zeroing it; average pooling gathers, one thread per input element,
// from the windows that cover it. The 16-bit floats (what a convolution
// under autocast returns) are read as float and each result rounded once;
// the backward passes that add with atomics (max and adaptive pooling)
// round at each add where windows overlap (the CPU adds in float and rounds
// once).
#include <cstdint>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"

namespace loom::cuda {
namespace {

#define LOOM_FOR_EACH(i, n)                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);       \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Plane geometry: `count` planes of (h, w) in, (ho, wo) out.
struct Planes {
  int64_t count, h, w, ho, wo;
};

Planes planes(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

// The input rows [start, end) adaptive pooling averages for output row i.
__device__ __forceinline__ int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
__device__ __forceinline__ int64_t adaptive_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

// The CPU's scan order and NaN rule: larger values replace the maximum, and
// the first NaN of the window (in row-major order) wins and stays.
// S: the storage type; T: the type values are compared in.
template <typename S, typename T>
__global__ void max_pool_kernel(const S* x, S* out, int64_t* indices, Planes s, Pool2dParams p) {
  const int64_t n = s.count * s.ho * s.wo;
  LOOM_FOR_EACH(o, n) {
    const int64_t ow = o % s.wo, oh = (o / s.wo) % s.ho, plane = o / (s.wo * s.ho);
    const S* in = x + plane * s.h * s.w;
    T best = -math::infinity<T>();
    int64_t best_at = -1;
    for (int i = 0; i < p.kernel_h; ++i) {
      const int64_t ih = oh * p.stride_h - p.pad_h + i;
      if (ih < 0 || ih >= s.h) continue;
      for (int j = 0; j < p.kernel_w; ++j) {
        const int64_t iw = ow * p.stride_w - p.pad_w + j;
        if (iw < 0 || iw >= s.w) continue;
        const T v = widen(in[ih * s.w + iw]);
        if (best_at < 0 || ((v > best || math::isnan(v)) && !math::isnan(best))) {
          best = v;
          best_at = ih * s.w + iw;
          if (math::isnan(v)) break;
        }
      }
    }
    out[o] = narrow_to<S>(best);  // exact: best is one of the inputs
    indices[o] = best_at;
  }
}

// S: float, double, __nv_bfloat16 or __half, all of which atomicAdd takes on sm_90.
template <typename S>
__global__ void max_pool_backward_kernel(const S* dy, const int64_t* indices, S* dx, Planes s) {
  const int64_t n = s.count * s.ho * s.wo;
  LOOM_FOR_EACH(o, n) {
    const int64_t at = indices[o];
    if (at >= 0) atomicAdd(dx + (o / (s.ho * s.wo)) * s.h * s.w + at, dy[o]);
  }
}

template <typename S, typename T>
__global__ void avg_pool_kernel(const S* x, S* out, Planes s, Pool2dParams p) {
  const int64_t n = s.count * s.ho * s.wo;
  const T divisor = T(p.kernel_h * p.kernel_w);
  LOOM_FOR_EACH(o, n) {
    const int64_t ow = o % s.wo, oh = (o / s.wo) % s.ho, plane = o / (s.wo * s.ho);
    const S* in = x + plane * s.h * s.w;
    T total = 0;
    for (int i = 0; i < p.kernel_h; ++i) {
      const int64_t ih = oh * p.stride_h - p.pad_h + i;
      if (ih < 0 || ih >= s.h) continue;
      for (int j = 0; j < p.kernel_w; ++j) {
        const int64_t iw = ow * p.stride_w - p.pad_w + j;
        if (iw >= 0 && iw < s.w) total += widen(in[ih * s.w + iw]);
      }
    }
    out[o] = narrow_to<S>(total / divisor);
  }
}

// First output index whose window (start o*stride - pad, length kernel) reaches `i`.
__device__ __forceinline__ int64_t first_window(int64_t i, int pad, int kernel, int stride) {
  const int64_t lowest_start = i + pad - kernel + 1;  // window starts >= this reach i
  return lowest_start <= 0 ? 0 : (lowest_start + stride - 1) / stride;
}

template <typename S, typename T>
__global__ void avg_pool_backward_kernel(const S* dy, S* dx, Planes s, Pool2dParams p) {
  const int64_t n = s.count * s.h * s.w;
  const T divisor = T(p.kernel_h * p.kernel_w);
  LOOM_FOR_EACH(q, n) {
    const int64_t iw = q % s.w, ih = (q / s.w) % s.h, plane = q / (s.w * s.h);
    const S* g = dy + plane * s.ho * s.wo;
    const int64_t oh0 = first_window(ih, p.pad_h, p.kernel_h, p.stride_h);
    const int64_t ow0 = first_window(iw, p.pad_w, p.kernel_w, p.stride_w);
    const int64_t oh_last = (ih + p.pad_h) / p.stride_h, ow_last = (iw + p.pad_w) / p.stride_w;
    const int64_t oh1 = oh_last < s.ho - 1 ? oh_last : s.ho - 1;
    const int64_t ow1 = ow_last < s.wo - 1 ? ow_last : s.wo - 1;
    T total = 0;
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) total += widen(g[oh * s.wo + ow]) / divisor;
    dx[q] = narrow_to<S>(total);
  }
}

template <typename S, typename T>
__global__ void adaptive_avg_pool_kernel(const S* x, S* out, Planes s) {
  const int64_t n = s.count * s.ho * s.wo;
  LOOM_FOR_EACH(o, n) {
    const int64_t ow = o % s.wo, oh = (o / s.wo) % s.ho, plane = o / (s.wo * s.ho);
    const S* in = x + plane * s.h * s.w;
    const int64_t h0 = adaptive_start(oh, s.h, s.ho), h1 = adaptive_end(oh, s.h, s.ho);
    const int64_t w0 = adaptive_start(ow, s.w, s.wo), w1 = adaptive_end(ow, s.w, s.wo);
    T total = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) total += widen(in[ih * s.w + iw]);
    out[o] = narrow_to<S>(total / T((h1 - h0) * (w1 - w0)));
  }
}

template <typename S, typename T>
__global__ void adaptive_avg_pool_backward_kernel(const S* dy, S* dx, Planes s) {
  const int64_t n = s.count * s.ho * s.wo;
  LOOM_FOR_EACH(o, n) {
    const int64_t ow = o % s.wo, oh = (o / s.wo) % s.ho, plane = o / (s.wo * s.ho);
    S* d = dx + plane * s.h * s.w;
    const int64_t h0 = adaptive_start(oh, s.h, s.ho), h1 = adaptive_end(oh, s.h, s.ho);
    const int64_t w0 = adaptive_start(ow, s.w, s.wo), w1 = adaptive_end(ow, s.w, s.wo);
    const S g = narrow_to<S>(widen(dy[o]) / T((h1 - h0) * (w1 - w0)));
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) atomicAdd(d + ih * s.w + iw, g);
  }
}

void zero(const Tensor& t, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(t.raw_data(), 0, t.nbytes(), stream));
}

}  // namespace

void CudaBackend::max_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
  if (out.numel() == 0) return;
  dispatch_floating_or_16bit(x.dtype(), "max_pool2d", [&](auto storage, auto compute) {
    using S = decltype(storage);
    LaunchContext ctx(out);
    max_pool_kernel<S, decltype(compute)><<<ctx.grid(out.numel()), kBlockSize, 0, ctx.stream>>>(
        static_cast<const S*>(x.raw_data()), static_cast<S*>(out.raw_data()), indices.data_ptr<int64_t>(),
        planes(x, out), p);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  if (dx.numel() == 0) return;
  dispatch_floating_or_16bit(dy.dtype(), "max_pool2d_backward", [&](auto storage, auto) {
    using S = decltype(storage);
    LaunchContext ctx(dx);
    zero(dx, ctx.stream);
    if (dy.numel() == 0) return;
    max_pool_backward_kernel<S><<<ctx.grid(dy.numel()), kBlockSize, 0, ctx.stream>>>(
        static_cast<const S*>(dy.raw_data()), indices.data_ptr<int64_t>(), static_cast<S*>(dx.raw_data()),
        planes(dx, dy));
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::avg_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_floating_or_16bit(x.dtype(), "avg_pool2d", [&](auto storage, auto compute) {
    using S = decltype(storage);
    LaunchContext ctx(out);
    avg_pool_kernel<S, decltype(compute)><<<ctx.grid(out.numel()), kBlockSize, 0, ctx.stream>>>(
        static_cast<const S*>(x.raw_data()), static_cast<S*>(out.raw_data()), planes(x, out), p);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::avg_pool2d_backward(const Tensor& dy, const Pool2dParams& p, const Tensor& dx) {
  if (dx.numel() == 0) return;
  dispatch_floating_or_16bit(dy.dtype(), "avg_pool2d_backward", [&](auto storage, auto compute) {
    using S = decltype(storage);
    LaunchContext ctx(dx);
    if (dy.numel() == 0) return zero(dx, ctx.stream);
    avg_pool_backward_kernel<S, decltype(compute)><<<ctx.grid(dx.numel()), kBlockSize, 0, ctx.stream>>>(
        static_cast<const S*>(dy.raw_data()), static_cast<S*>(dx.raw_data()), planes(dx, dy), p);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::adaptive_avg_pool2d(const Tensor& x, const Tensor& out) {
  if (out.numel() == 0) return;
  dispatch_floating_or_16bit(x.dtype(), "adaptive_avg_pool2d", [&](auto storage, auto compute) {
    using S = decltype(storage);
    LaunchContext ctx(out);
    adaptive_avg_pool_kernel<S, decltype(compute)><<<ctx.grid(out.numel()), kBlockSize, 0, ctx.stream>>>(
        static_cast<const S*>(x.raw_data()), static_cast<S*>(out.raw_data()), planes(x, out));
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) {
  if (dx.numel() == 0) return;
  dispatch_floating_or_16bit(dy.dtype(), "adaptive_avg_pool2d_backward", [&](auto storage, auto compute) {
    using S = decltype(storage);
    LaunchContext ctx(dx);
    zero(dx, ctx.stream);
    if (dy.numel() == 0) return;
    adaptive_avg_pool_backward_kernel<S, decltype(compute)><<<ctx.grid(dy.numel()), kBlockSize, 0, ctx.stream>>>(
        static_cast<const S*>(dy.raw_data()), static_cast<S*>(dx.raw_data()), planes(dx, dy));
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

}  // namespace loom::cuda
