// The LSTM cell's pointwise part as one op each way (tensor/backend.h
// lstm_cell): a step of a 2-layer LSTM was 22 small tensors and autograd
// nodes, now it is two and one.
#include "autograd/node.h"
#include "nn/functional.h"
#include "nn/functional/operands.h"

namespace loom::nn::functional {

std::pair<Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev) {
  LOOM_CHECK(input_gates.defined() && hidden_gates.defined() && c_prev.defined(),
             "lstm_cell: got an undefined tensor");
  LOOM_CHECK(c_prev.dim() == 2, "lstm_cell: c_prev must be (B, H), got shape ", c_prev.shape());
  const int64_t batch = c_prev.size(0), hidden = c_prev.size(1);
  const Shape gates_shape{batch, 4 * hidden};
  LOOM_CHECK(input_gates.shape() == gates_shape && hidden_gates.shape() == gates_shape,
             "lstm_cell: gates must be (B, 4H) = ", gates_shape, " for c_prev of shape ", c_prev.shape(), "; got ",
             input_gates.shape(), " and ", hidden_gates.shape());
  const DType dtype = promoted_floating_dtype("lstm_cell", {input_gates, hidden_gates, c_prev});
  // to() and contiguous() return the tensor itself when it already is.
  const Tensor xg = input_gates.to(dtype).contiguous(), hg = hidden_gates.to(dtype).contiguous(),
               cp = c_prev.to(dtype).contiguous();
  const TensorOptions options = cp.options();
  Tensor h = empty({batch, hidden}, options), c = empty({batch, hidden}, options);
  Tensor activations = empty(gates_shape, options);
  Backend& backend = backend_for(cp.device());
  backend.lstm_cell(xg, hg, cp, h, c, activations);
  if (autograd::needs_grad({xg, hg, cp}))
    autograd::record("LstmCellBackward", {xg, hg, cp}, {h, c},
                     [activations, sc_prev = autograd::SavedTensor(cp), sc = autograd::SavedTensor(c)](
                         const TensorList& g) {
                       const Tensor& c = sc.get();
                       // A gradient that does not reach h or c is zero.
                       auto given = [&](const Tensor& d) {
                         if (!d.defined()) return zeros(c.shape(), c.options());
                         return d.contiguous();
                       };
                       Tensor dgates = empty(activations.shape(), c.options()), dc_prev = empty(c.shape(), c.options());
                       backend_for(c.device()).lstm_cell_backward(given(g[0]), given(g[1]), activations,
                                                                  sc_prev.get(), c, dgates, dc_prev);
                       return TensorList{dgates, dgates, dc_prev};
                     });
  return {h, c};
}

}  // namespace loom::nn::functional
