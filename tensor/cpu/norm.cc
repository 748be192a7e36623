// CPU layer norm over the last dim: one pass for the statistics and one for
// the output per row; the backward needs two row reductions per row, and the
// weight and bias gradients are column sums accumulated per thread.
#include <cmath>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/parallel.h"

namespace loom::cpu {

void CpuBackend::layer_norm(const Tensor& x_t, const Tensor& w_t, const Tensor& b_t, double eps,
                            const Tensor& y_t, const Tensor& mean_t, const Tensor& rstd_t) {
  if (run_in_float32({x_t, w_t, b_t, y_t, mean_t, rstd_t}, {3, 4, 5},
                     [&](const TensorList& t) { layer_norm(t[0], t[1], t[2], eps, t[3], t[4], t[5]); }))
    return;
  LOOM_INTERNAL_ASSERT(x_t.dim() == 2 && x_t.is_contiguous() && y_t.shape() == x_t.shape() &&
                       mean_t.numel() == x_t.size(0));
  dispatch_floating(x_t.dtype(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const int64_t cols = x_t.size(-1), rows = x_t.numel() / std::max<int64_t>(cols, 1);
    const T* x = x_t.data_ptr<T>();
    const T* w = w_t.defined() ? w_t.data_ptr<T>() : nullptr;
    const T* b = b_t.defined() ? b_t.data_ptr<T>() : nullptr;
    T* y = y_t.data_ptr<T>();
    T* mean = mean_t.data_ptr<T>();
    T* rstd = rstd_t.data_ptr<T>();
    parallel_for(rows, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * cols;
        double sum = 0, sum_sq = 0;  // in double: the variance is a difference of large terms
        for (int64_t c = 0; c < cols; ++c) sum += xr[c];
        const double mu = sum / cols;
        for (int64_t c = 0; c < cols; ++c) sum_sq += (xr[c] - mu) * (xr[c] - mu);
        const T inv = T(1.0 / std::sqrt(sum_sq / cols + eps));
        mean[r] = T(mu);
        rstd[r] = inv;
        T* yr = y + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          T v = (xr[c] - T(mu)) * inv;
          yr[c] = (w ? v * w[c] : v) + (b ? b[c] : T(0));
        }
      }
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& dy_t, const Tensor& x_t, const Tensor& w_t,
                                     const Tensor& mean_t, const Tensor& rstd_t, const Tensor& dx_t,
                                     const Tensor& dw_t, const Tensor& db_t) {
  if (run_in_float32({dy_t, x_t, w_t, mean_t, rstd_t, dx_t, dw_t, db_t}, {5, 6, 7}, [&](const TensorList& t) {
        layer_norm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]);
      }))
    return;
  // With xhat = (x - mean) rstd and g = dy * weight:
  //   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dweight = sum_rows dy xhat,  dbias = sum_rows dy.
  LOOM_INTERNAL_ASSERT(x_t.dim() == 2 && dy_t.shape() == x_t.shape() && (!dx_t.defined() || dx_t.shape() == x_t.shape()));
  dispatch_floating(x_t.dtype(), "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t cols = x_t.size(-1), rows = x_t.numel() / std::max<int64_t>(cols, 1);
    const T* dy = dy_t.data_ptr<T>();
    const T* x = x_t.data_ptr<T>();
    const T* w = w_t.defined() ? w_t.data_ptr<T>() : nullptr;
    const T* mean = mean_t.data_ptr<T>();
    const T* rstd = rstd_t.data_ptr<T>();
    T* dx = dx_t.defined() ? dx_t.data_ptr<T>() : nullptr;
    T* dw = dw_t.defined() ? dw_t.data_ptr<T>() : nullptr;
    T* db = db_t.defined() ? db_t.data_ptr<T>() : nullptr;
    // Per-chunk column sums for dweight and dbias, added in chunk order (deterministic).
    const int64_t grain = std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(cols, 1));
    const int64_t chunks = parallel_chunks(rows, grain);
    std::vector<T> dw_parts(dw ? chunks * cols : 0, T(0)), db_parts(db ? chunks * cols : 0, T(0));
    parallel_for_chunks(rows, grain, [&](int64_t chunk, int64_t r0, int64_t r1) {
      T* dw_part = dw ? dw_parts.data() + chunk * cols : nullptr;
      T* db_part = db ? db_parts.data() + chunk * cols : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * cols;
        const T* dyr = dy + r * cols;
        const T mu = mean[r], inv = rstd[r];
        double g_sum = 0, gx_sum = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const T xhat = (xr[c] - mu) * inv;
          const T g = w ? dyr[c] * w[c] : dyr[c];
          g_sum += g;
          gx_sum += g * xhat;
          if (dw_part) dw_part[c] += dyr[c] * xhat;
          if (db_part) db_part[c] += dyr[c];
        }
        if (!dx) continue;
        const T g_mean = T(g_sum / cols), gx_mean = T(gx_sum / cols);
        T* dxr = dx + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          const T xhat = (xr[c] - mu) * inv;
          const T g = w ? dyr[c] * w[c] : dyr[c];
          dxr[c] = inv * (g - g_mean - xhat * gx_mean);
        }
      }
    });
    for (int64_t c = 0; c < cols; ++c) {
      if (dw) dw[c] = T(0);
      if (db) db[c] = T(0);
      for (int64_t k = 0; k < chunks; ++k) {
        if (dw) dw[c] += dw_parts[k * cols + c];
        if (db) db[c] += db_parts[k * cols + c];
      }
    }
  });
}

}  // namespace loom::cpu
