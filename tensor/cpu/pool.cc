// CPU pooling over NCHW planes: max (with argmax indices for the backward),
// average, and adaptive average. Every plane (n, c) is independent.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/max_pool_2x2.h"
#include "tensor/cpu/parallel.h"

namespace loom::cpu {
namespace {

struct Planes {
  int64_t count, h, w, ho, wo;
};

Planes planes(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

// Calls fn(plane index) for every plane, in parallel.
template <typename F>
void for_each_plane(const Planes& s, F fn) {
  parallel_for(s.count, std::max<int64_t>(1, 4096 / std::max<int64_t>(s.h * s.w, 1)),
               [&](int64_t begin, int64_t end) {
                 for (int64_t plane = begin; plane < end; ++plane) fn(plane);
               });
}

// The input positions [begin, end) a pooling window covers along one axis,
// clipped to the input (padding is never the maximum).
struct Window {
  int64_t begin, end;
};

Window window(int64_t out_index, int64_t stride, int64_t pad, int64_t kernel, int64_t size) {
  const int64_t start = out_index * stride - pad;
  return {std::max<int64_t>(start, 0), std::min<int64_t>(start + kernel, size)};
}

// The input rows [start, end) that adaptive pooling averages for output row i.
int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

// Whether `v` replaces the running maximum `best`: larger, or the first NaN
// (which then stays). Bitwise, not short-circuit: the winner is data-dependent,
// so branches would mispredict half the time; this compiles to selects.
template <typename T>
bool replaces(T v, T best) {
  return ((v > best) | (v != v)) & (best == best);
}

// One output row of max pooling without padding: every window lies inside
// the input, so the loop over output columns is innermost and branch-free.
// Writes the outputs [first, wo) of the row.
template <typename T>
void max_pool_row(const T* __restrict in, int64_t w, int64_t ih0, int64_t first, int64_t wo, const Pool2dParams& p,
                  T* __restrict out, int64_t* __restrict idx) {
  for (int64_t ow = first; ow < wo; ++ow) {
    idx[ow] = ih0 * w + ow * p.stride_w;
    out[ow] = in[idx[ow]];
  }
  for (int64_t i = 0; i < p.kernel_h; ++i)
    for (int64_t j = 0; j < p.kernel_w; ++j) {
      const int64_t row = (ih0 + i) * w + j;
#pragma omp simd
      for (int64_t ow = first; ow < wo; ++ow) {
        const int64_t at = row + ow * p.stride_w;
        const T v = in[at];
        const bool take = replaces(v, out[ow]);
        out[ow] = take ? v : out[ow];
        idx[ow] = take ? at : idx[ow];
      }
    }
}

void CpuBackend::max_pool2d(const Tensor& x_t, const Pool2dParams& p, const Tensor& out_t,
                            const Tensor& idx_t) {
  if (run_in_float32({x_t, out_t}, {1}, [&](const TensorList& t) { max_pool2d(t[0], p, t[1], idx_t); })) return;
  dispatch_floating(x_t.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(x_t, out_t);
    const T* x = x_t.data_ptr<T>();
    T* out = out_t.data_ptr<T>();
    int64_t* idx = idx_t.data_ptr<int64_t>();
    const bool unpadded = p.pad_h == 0 && p.pad_w == 0;
    for_each_plane(s, [&](int64_t plane) {
      const T* in = x + plane * s.h * s.w;
      for (int64_t oh = 0; oh < s.ho; ++oh) {
        T* out_row = out + (plane * s.ho + oh) * s.wo;
        int64_t* idx_row = idx + (plane * s.ho + oh) * s.wo;
        if (unpadded) {
          int64_t done = 0;
          if constexpr (std::is_same_v<T, float>)
            if (p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2)
              done = max_pool_row_2x2(in + 2 * oh * s.w, in + (2 * oh + 1) * s.w, s.w, 2 * oh * s.w, s.wo, out_row,
                                      idx_row);
          max_pool_row(in, s.w, oh * p.stride_h, done, s.wo, p, out_row, idx_row);
          continue;
        }
        const Window rows = window(oh, p.stride_h, p.pad_h, p.kernel_h, s.h);
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const Window cols = window(ow, p.stride_w, p.pad_w, p.kernel_w, s.w);
          int64_t best_at = rows.begin * s.w + cols.begin;
          T best = in[best_at];
          for (int64_t ih = rows.begin; ih < rows.end; ++ih)
            for (int64_t iw = cols.begin; iw < cols.end; ++iw) {
              const T v = in[ih * s.w + iw];
              const bool take = replaces(v, best);
              best = take ? v : best;
              best_at = take ? ih * s.w + iw : best_at;
            }
          out_row[ow] = best;
          idx_row[ow] = best_at;
        }
      }
    });
  });
}

void CpuBackend::max_pool2d_backward(const Tensor& dy_t, const Tensor& idx_t, const Tensor& dx_t) {
  if (run_in_float32({dy_t, dx_t}, {1}, [&](const TensorList& t) { max_pool2d_backward(t[0], idx_t, t[1]); })) return;
  dispatch_floating(dy_t.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(dx_t, dy_t);
    const T* dy = dy_t.data_ptr<T>();
    const int64_t* idx = idx_t.data_ptr<int64_t>();
    T* dx = dx_t.data_ptr<T>();
    for_each_plane(s, [&](int64_t plane) {
      T* d = dx + plane * s.h * s.w;
      std::fill(d, d + s.h * s.w, T(0));
      for (int64_t o = 0; o < s.ho * s.wo; ++o) {
        const int64_t at = idx[plane * s.ho * s.wo + o];
        if (at >= 0) d[at] += dy[plane * s.ho * s.wo + o];
      }
    });
  });
}

void CpuBackend::avg_pool2d(const Tensor& x_t, const Pool2dParams& p, const Tensor& out_t) {
  if (run_in_float32({x_t, out_t}, {1}, [&](const TensorList& t) { avg_pool2d(t[0], p, t[1]); })) return;
  dispatch_floating(x_t.dtype(), "avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(x_t, out_t);
    const T* x = x_t.data_ptr<T>();
    T* out = out_t.data_ptr<T>();
    const T divisor = T(p.kernel_h * p.kernel_w);
    for_each_plane(s, [&](int64_t plane) {
      const T* in = x + plane * s.h * s.w;
      for (int64_t oh = 0; oh < s.ho; ++oh)
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          T total = 0;
          for (int64_t i = 0; i < p.kernel_h; ++i) {
            const int64_t ih = oh * p.stride_h - p.pad_h + i;
            if (ih < 0 || ih >= s.h) continue;
            for (int64_t j = 0; j < p.kernel_w; ++j) {
              const int64_t iw = ow * p.stride_w - p.pad_w + j;
              if (iw >= 0 && iw < s.w) total += in[ih * s.w + iw];
            }
          }
          out[(plane * s.ho + oh) * s.wo + ow] = total / divisor;
        }
    });
  });
}

void CpuBackend::avg_pool2d_backward(const Tensor& dy_t, const Pool2dParams& p, const Tensor& dx_t) {
  if (run_in_float32({dy_t, dx_t}, {1}, [&](const TensorList& t) { avg_pool2d_backward(t[0], p, t[1]); })) return;
  dispatch_floating(dy_t.dtype(), "avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(dx_t, dy_t);
    const T* dy = dy_t.data_ptr<T>();
    T* dx = dx_t.data_ptr<T>();
    const T divisor = T(p.kernel_h * p.kernel_w);
    for_each_plane(s, [&](int64_t plane) {
      T* d = dx + plane * s.h * s.w;
      std::fill(d, d + s.h * s.w, T(0));
      for (int64_t oh = 0; oh < s.ho; ++oh)
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const T g = dy[(plane * s.ho + oh) * s.wo + ow] / divisor;
          for (int64_t i = 0; i < p.kernel_h; ++i) {
            const int64_t ih = oh * p.stride_h - p.pad_h + i;
            if (ih < 0 || ih >= s.h) continue;
            for (int64_t j = 0; j < p.kernel_w; ++j) {
              const int64_t iw = ow * p.stride_w - p.pad_w + j;
              if (iw >= 0 && iw < s.w) d[ih * s.w + iw] += g;
            }
          }
        }
    });
  });
}

void CpuBackend::adaptive_avg_pool2d(const Tensor& x_t, const Tensor& out_t) {
  if (run_in_float32({x_t, out_t}, {1}, [&](const TensorList& t) { adaptive_avg_pool2d(t[0], t[1]); })) return;
  dispatch_floating(x_t.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(x_t, out_t);
    const T* x = x_t.data_ptr<T>();
    T* out = out_t.data_ptr<T>();
    for_each_plane(s, [&](int64_t plane) {
      const T* in = x + plane * s.h * s.w;
      for (int64_t oh = 0; oh < s.ho; ++oh)
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const int64_t h0 = adaptive_start(oh, s.h, s.ho), h1 = adaptive_end(oh, s.h, s.ho);
          const int64_t w0 = adaptive_start(ow, s.w, s.wo), w1 = adaptive_end(ow, s.w, s.wo);
          T total = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) total += in[ih * s.w + iw];
          out[(plane * s.ho + oh) * s.wo + ow] = total / T((h1 - h0) * (w1 - w0));
        }
    });
  });
}

void CpuBackend::adaptive_avg_pool2d_backward(const Tensor& dy_t, const Tensor& dx_t) {
  if (run_in_float32({dy_t, dx_t}, {1}, [&](const TensorList& t) { adaptive_avg_pool2d_backward(t[0], t[1]); })) return;
  dispatch_floating(dy_t.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(dx_t, dy_t);
    const T* dy = dy_t.data_ptr<T>();
    T* dx = dx_t.data_ptr<T>();
    for_each_plane(s, [&](int64_t plane) {
      T* d = dx + plane * s.h * s.w;
      std::fill(d, d + s.h * s.w, T(0));
      for (int64_t oh = 0; oh < s.ho; ++oh)
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const int64_t h0 = adaptive_start(oh, s.h, s.ho), h1 = adaptive_end(oh, s.h, s.ho);
          const int64_t w0 = adaptive_start(ow, s.w, s.wo), w1 = adaptive_end(ow, s.w, s.wo);
          const T g = dy[(plane * s.ho + oh) * s.wo + ow] / T((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) d[ih * s.w + iw] += g;
        }
    });
  });
}

}  // namespace loom::cpu
