// CPU layer norm over the last dim, a row at a time: float32 rows in AVX2
// registers (layer_norm_rows.h, 1.8x these expressions on a GPT's rows),
// other dtypes as Eigen array expressions (vectorised). Passes over the row
// for the statistics (a mean, then the distances from it) and one for the
// output. The backward needs two row sums per row, and the weight and bias
// gradients are column sums accumulated per thread chunk.
//
// The sums run in the tensor's own type, eight or sixteen lanes at a time,
// in an order that does not depend on the row's address (fixed_order_sum).
// They were scalar loops in double; a row holds at most a few thousand
// values, the mean is corrected by a second sum (below), and the variance
// is a sum of squares around the mean (never a difference of large terms),
// so float lanes keep the scalar double loops' accuracy (layers_test's
// off-centre rows) and the loops vectorise.
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/layer_norm_rows.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/vector_math.h"
#include "tensor/creation.h"

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
    parallel_for(rows, items_per_grain(cols), [&](int64_t r0, int64_t r1) {
#ifdef __AVX2__
      if constexpr (rows_in_registers<T>()) {
        const VectorRow lanes(cols);
        for (int64_t r = r0; r < r1; ++r)
          layer_norm_rows::forward(lanes, x + r * cols, w, b, static_cast<float>(eps), y + r * cols, mean + r, rstd + r);
        return;
      }
#endif
      for (int64_t r = r0; r < r1; ++r) {
        const ConstArrayMap<T> xr(x + r * cols, cols);
        // A first mean, then the sums of the distances from it and of their
        // squares: the first corrects the mean (a float sum of large values
        // rounds), and takes its square out of the variance.
        const T first_mean = fixed_order_sum(xr) / T(cols);
        const T shift = (xr - first_mean).sum() / T(cols);
        const T mu = first_mean + shift;
        const T var = std::max(T(0), (xr - first_mean).square().sum() / T(cols) - shift * shift);
        const T inv = T(1) / std::sqrt(var + T(eps));
        mean[r] = mu;
        rstd[r] = inv;
        ArrayMap<T> yr(y + r * cols, cols);
        if (w && b)
          yr = (xr - mu) * inv * ConstArrayMap<T>(w, cols) + ConstArrayMap<T>(b, cols);
        else if (w)
          yr = (xr - mu) * inv * ConstArrayMap<T>(w, cols);
        else if (b)
          yr = (xr - mu) * inv + ConstArrayMap<T>(b, cols);
        else
          yr = (xr - mu) * inv;
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
    // One buffer from the caching allocator (no system allocation once
    // warm) holds, per thread chunk, the chunk's column sums for dweight
    // and dbias, which are added in chunk order afterwards (deterministic),
    // and for the Eigen expressions a row's xhat and g (both passes read
    // them).
    const int64_t grain = items_per_grain(cols), chunks = parallel_chunks(rows, grain);
    const int64_t part_rows = (dw ? chunks : 0) + (db ? chunks : 0);
    const int64_t scratch_rows = rows_in_registers<T>() ? 0 : 2 * chunks;
    const Tensor buffer = empty({std::max<int64_t>(1, (scratch_rows + part_rows) * cols)}, {.dtype = x_t.dtype()});
    T* scratch = buffer.data_ptr<T>();
    T* dw_parts = scratch + scratch_rows * cols;
    T* db_parts = dw_parts + (dw ? chunks * cols : 0);
    ArrayMap<T>(dw_parts, part_rows * cols).setZero();
    parallel_for_chunks(rows, grain, [&](int64_t chunk, int64_t r0, int64_t r1) {
#ifdef __AVX2__
      if constexpr (rows_in_registers<T>()) {
        const VectorRow lanes(cols);
        for (int64_t r = r0; r < r1; ++r)
          layer_norm_rows::backward(lanes, dy + r * cols, x + r * cols, w, mean[r], rstd[r], dx ? dx + r * cols : nullptr,
                                    dw ? dw_parts + chunk * cols : nullptr, db ? db_parts + chunk * cols : nullptr);
        return;
      }
#endif
      ArrayMap<T> xhat(scratch + 2 * chunk * cols, cols), g(scratch + (2 * chunk + 1) * cols, cols);
      for (int64_t r = r0; r < r1; ++r) {
        const ConstArrayMap<T> xr(x + r * cols, cols), dyr(dy + r * cols, cols);
        xhat = (xr - mean[r]) * rstd[r];
        if (dw) ArrayMap<T>(dw_parts + chunk * cols, cols) += dyr * xhat;
        if (db) ArrayMap<T>(db_parts + chunk * cols, cols) += dyr;
        if (!dx) continue;
        if (w)
          g = dyr * ConstArrayMap<T>(w, cols);
        else
          g = dyr;
        const T g_mean = fixed_order_sum(g) / T(cols), gx_mean = (g * xhat).sum() / T(cols);
        ArrayMap<T>(dx + r * cols, cols) = rstd[r] * (g - g_mean - xhat * gx_mean);
      }
    });
    auto add_parts = [&](T* total, const T* parts) {
      ArrayMap<T> sum(total, cols);
      sum.setZero();
      for (int64_t k = 0; k < chunks; ++k) sum += ConstArrayMap<T>(parts + k * cols, cols);
    };
    if (dw) add_parts(dw, dw_parts);
    if (db) add_parts(db, db_parts);
  });
}

}  // namespace loom::cpu
