// CPU LSTM cell: the pointwise part of a step in one pass per batch row,
// where the composed version ran eleven elementwise ops (and as many
// tensors) each way. Rows go to threads. float32 rows run in AVX2 registers
// (lstm_cell_rows.h); other dtypes as Eigen array expressions, each gate's
// slice at a time, so the vectorised logistic and tanh apply.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/lstm_cell_rows.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/vector_math.h"

namespace loom::cpu {

void CpuBackend::lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev,
                           const Tensor& h, const Tensor& c, const Tensor& activations) {
  if (run_in_float32({input_gates, hidden_gates, c_prev, h, c, activations}, {3, 4, 5},
                     [&](const TensorList& t) { lstm_cell(t[0], t[1], t[2], t[3], t[4], t[5]); }))
    return;
  dispatch_floating(c.dtype(), "lstm_cell", [&](auto tag) {
    using T = decltype(tag);
    const int64_t batch = c.size(0), n = c.size(1);
    const T* xg = input_gates.data_ptr<T>();
    const T* hg = hidden_gates.data_ptr<T>();
    const T* cp = c_prev.data_ptr<T>();
    T* ho = h.data_ptr<T>();
    T* co = c.data_ptr<T>();
    T* act = activations.data_ptr<T>();
    parallel_for(batch, items_per_grain(4 * n), [&](int64_t b0, int64_t b1) {
#ifdef __AVX2__
      if constexpr (rows_in_registers<T>()) {
        const VectorRow row(n);
        for (int64_t b = b0; b < b1; ++b)
          lstm_cell_rows::forward(row, xg + b * 4 * n, hg + b * 4 * n, cp + b * n, ho + b * n, co + b * n,
                                  act + b * 4 * n);
        return;
      }
#endif
      for (int64_t b = b0; b < b1; ++b) {
        ArrayMap<T> a(act + b * 4 * n, 4 * n);
        a = ConstArrayMap<T>(xg + b * 4 * n, 4 * n) + ConstArrayMap<T>(hg + b * 4 * n, 4 * n);
        a.head(2 * n) = a.head(2 * n).logistic();  // i, f
        a.segment(2 * n, n) = a.segment(2 * n, n).tanh();  // g
        a.tail(n) = a.tail(n).logistic();  // o
        ArrayMap<T> c_row(co + b * n, n);
        c_row = a.segment(n, n) * ConstArrayMap<T>(cp + b * n, n) + a.head(n) * a.segment(2 * n, n);
        ArrayMap<T>(ho + b * n, n) = a.tail(n) * c_row.tanh();
      }
    });
  });
}

void CpuBackend::lstm_cell_backward(const Tensor& dh, const Tensor& dc, const Tensor& activations,
                                    const Tensor& c_prev, const Tensor& c, const Tensor& dgates,
                                    const Tensor& dc_prev) {
  if (run_in_float32({dh, dc, activations, c_prev, c, dgates, dc_prev}, {5, 6},
                     [&](const TensorList& t) { lstm_cell_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6]); }))
    return;
  // With t = tanh(c) and dc_total = dc + dh o (1 - t^2), the gradient reaching c:
  //   d(o) = dh t,  d(i) = dc_total g,  d(f) = dc_total c_prev,  d(g) = dc_total i,
  //   dc_prev = dc_total f,
  // each gate's d times its activation's derivative (s (1 - s), or 1 - g^2 for tanh).
  dispatch_floating(c.dtype(), "lstm_cell_backward", [&](auto tag) {
    using T = decltype(tag);
    const int64_t batch = c.size(0), n = c.size(1);
    const T* dh_p = dh.data_ptr<T>();
    const T* dc_p = dc.data_ptr<T>();
    const T* act = activations.data_ptr<T>();
    const T* cp = c_prev.data_ptr<T>();
    const T* co = c.data_ptr<T>();
    T* dg_p = dgates.data_ptr<T>();
    T* dcp_p = dc_prev.data_ptr<T>();
    parallel_for(batch, items_per_grain(4 * n), [&](int64_t b0, int64_t b1) {
#ifdef __AVX2__
      if constexpr (rows_in_registers<T>()) {
        const VectorRow row(n);
        for (int64_t b = b0; b < b1; ++b)
          lstm_cell_rows::backward(row, dh_p + b * n, dc_p + b * n, act + b * 4 * n, cp + b * n, co + b * n,
                                   dg_p + b * 4 * n, dcp_p + b * n);
        return;
      }
#endif
      for (int64_t b = b0; b < b1; ++b) {
        ConstArrayMap<T> a(act + b * 4 * n, 4 * n), dh_row(dh_p + b * n, n);
        const auto i = a.head(n), f = a.segment(n, n), g = a.segment(2 * n, n), o = a.tail(n);
        ArrayMap<T> dg(dg_p + b * 4 * n, 4 * n), dc_total(dcp_p + b * n, n);
        auto d_o = dg.tail(n);
        d_o = ConstArrayMap<T>(co + b * n, n).tanh();  // t, for now
        dc_total = ConstArrayMap<T>(dc_p + b * n, n) + dh_row * o * (T(1) - d_o.square());
        d_o = dh_row * d_o * o * (T(1) - o);
        dg.head(n) = dc_total * g * i * (T(1) - i);
        dg.segment(n, n) = dc_total * ConstArrayMap<T>(cp + b * n, n) * f * (T(1) - f);
        dg.segment(2 * n, n) = dc_total * i * (T(1) - g.square());
        dc_total *= f;  // now dc_prev
      }
    });
  });
}

}  // namespace loom::cpu
