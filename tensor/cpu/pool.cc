// CPU pooling over NCHW planes: max (with argmax indices for the backward),
// average, and adaptive average. Every plane (n, c) is independent.
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
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

// One output row of the most common pooling, 2x2 windows with stride 2. The
// four candidates are compared as a tree, which gives what the row-major
// scan gives (the first maximum, or the first NaN): (a b) and (c d), then the
// winners. Returns the number of outputs written (from 0); the caller does
// the rest. With AVX2, 8 outputs at a time, the last ones with masked loads
// and stores (the cnn's rows have 14 and 7 outputs): the compiler does not
// vectorise this loop (the stride-2 loads and the 64-bit indices).
inline int64_t max_pool_row_2x2(const float* top, const float* bottom, int64_t w, int64_t first_at, int64_t wo,
                                float* out, int64_t* idx) {
  int64_t ow = 0;
#ifdef __AVX2__
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // Lanes [0, n) set, for n in [0, 8] (n may be outside: clamped by the compare).
  auto first_lanes = [&](int64_t n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), lanes); };
  // Even and odd elements of the `n` (at most 16) floats at p, each in order.
  auto split = [&](const float* p, int64_t n, __m256& even, __m256& odd) {
    const __m256 lo = _mm256_maskload_ps(p, first_lanes(n)), hi = _mm256_maskload_ps(p + 8, first_lanes(n - 8));
    constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1), kOrder = _MM_SHUFFLE(3, 1, 2, 0);
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, kEven)), kOrder));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, kOdd)), kOrder));
  };
  // replaces(v, best) on 8 lanes: (v > best or v is NaN) and best is not NaN.
  auto replaces8 = [](__m256 v, __m256 best) {
    const __m256 larger_or_nan = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_and_ps(larger_or_nan, _mm256_cmp_ps(best, best, _CMP_ORD_Q));
  };
  const __m256i one = _mm256_set1_epi32(1), row = _mm256_set1_epi32(static_cast<int32_t>(w));
  const __m256i lane_offsets = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  for (; ow < wo; ow += 8) {
    const int64_t n = std::min<int64_t>(8, wo - ow);
    __m256 a, b, c, d;
    split(top + 2 * ow, 2 * n, a, b);
    split(bottom + 2 * ow, 2 * n, c, d);
    const __m256 right_top = replaces8(b, a), right_bottom = replaces8(d, c);
    const __m256 upper = _mm256_blendv_ps(a, b, right_top), lower = _mm256_blendv_ps(c, d, right_bottom);
    const __m256 take_lower = replaces8(lower, upper);
    const __m256i valid = first_lanes(n);
    _mm256_maskstore_ps(out + ow, valid, _mm256_blendv_ps(upper, lower, take_lower));
    // Offsets within the window (0, 1, w, w + 1) in 32 bits, then widened.
    const __m256i upper_at = _mm256_and_si256(_mm256_castps_si256(right_top), one);
    const __m256i lower_at = _mm256_add_epi32(row, _mm256_and_si256(_mm256_castps_si256(right_bottom), one));
    const __m256i at = _mm256_add_epi32(
        lane_offsets, _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(upper_at),
                                                           _mm256_castsi256_ps(lower_at), take_lower)));
    const __m256i base = _mm256_set1_epi64x(first_at + 2 * ow);
    auto* idx64 = reinterpret_cast<long long*>(idx + ow);
    _mm256_maskstore_epi64(idx64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(valid)),
                           _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at))));
    _mm256_maskstore_epi64(idx64 + 4, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(valid, 1)),
                           _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1))));
  }
#endif
  return ow;
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
