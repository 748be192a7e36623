// CPU pooling over NCHW planes: max (with argmax indices for the backward),
// average, and adaptive average. Every plane (n, c) is independent.
#include <cmath>
#include <limits>

#include "tensor/cpu/cpu_backend.h"
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

// The input rows [start, end) that adaptive pooling averages for output row i.
int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t adaptive_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

}  // namespace

void CpuBackend::max_pool2d(const Tensor& x_t, const Pool2dParams& p, const Tensor& out_t,
                            const Tensor& idx_t) {
  dispatch_floating(x_t.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const Planes s = planes(x_t, out_t);
    const T* x = x_t.data_ptr<T>();
    T* out = out_t.data_ptr<T>();
    int64_t* idx = idx_t.data_ptr<int64_t>();
    for_each_plane(s, [&](int64_t plane) {
      const T* in = x + plane * s.h * s.w;
      for (int64_t oh = 0; oh < s.ho; ++oh)
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          T best = -std::numeric_limits<T>::infinity();
          int64_t best_at = -1;
          for (int64_t i = 0; i < p.kernel_h; ++i) {
            const int64_t ih = oh * p.stride_h - p.pad_h + i;
            if (ih < 0 || ih >= s.h) continue;
            for (int64_t j = 0; j < p.kernel_w; ++j) {
              const int64_t iw = ow * p.stride_w - p.pad_w + j;
              if (iw < 0 || iw >= s.w) continue;
              const T v = in[ih * s.w + iw];
              if (best_at < 0 || v > best || std::isnan(v)) {
                best = v;
                best_at = ih * s.w + iw;
                if (std::isnan(v)) break;
              }
            }
          }
          out[(plane * s.ho + oh) * s.wo + ow] = best;
          idx[(plane * s.ho + oh) * s.wo + ow] = best_at;
        }
    });
  });
}

void CpuBackend::max_pool2d_backward(const Tensor& dy_t, const Tensor& idx_t, const Tensor& dx_t) {
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
