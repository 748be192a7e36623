// One LSTM layer over a whole sequence as one autograd op. The composed
// layer recorded a product, a cell, an unbind slice and a stack entry per
// step, and backward ran them node by node, with weight_hh's gradient
// summed from one small product per step. Here the forward is a loop of two
// kernels per step writing straight into the output; the backward runs
// through time in a loop of two kernels per step, and weight_hh's gradient
// is a single product over all steps (as cuDNN and PyTorch's fused RNNs do).
#include "autograd/node.h"
#include "nn/functional.h"
#include "nn/functional/operands.h"
#include "tensor/flop_counter.h"

namespace loom::nn::functional {
namespace {

// out = a @ b for 2-D operands, through the backend's batched product (a
// batch of one). It bypasses mm, so it counts its FLOPs as mm's itself.
void matmul_into(Backend& backend, const Tensor& a, const Tensor& b, const Tensor& out) {
  backend.matmul(a.unsqueeze(0), b.unsqueeze(0), Tensor(), out.unsqueeze(0));
  count_flops("mm", flops::mm(a.size(0), a.size(1), b.size(1)));
}

// The saved forward, and the backward through time.
struct LstmLayerTape {
  // The op's inputs that the backward reads again, and its output: saved so
  // that an in-place change before backward is an error, not a wrong gradient.
  autograd::SavedTensor saved_weight_hh, saved_h0, saved_c0;  // (4H, H), (B, H), (B, H)
  autograd::SavedTensor hidden;  // (T, B, H): every step's h (the layer's output)
  Tensor cells, activations;     // (T, B, H), (T, B, 4H); the op's own, never seen outside

  // What backward through time found for the gates: kept by a split
  // backward's first pass (autograd/split_backward.h) for weight_hh's
  // gradient in its second.
  Tensor dgates_for_weight;

  // grads: d output (T, B, H), d h_T, d c_T, each possibly undefined. Returns
  // {d gates, d weight_hh, d h0, d c0} for the `wanted` inputs (and
  // whatever else came with them).
  TensorList backward(const TensorList& grads, const autograd::InputMask& wanted) {
    const bool weight_wanted = autograd::wants(wanted, 1);
    const bool through_time_wanted = autograd::wants(wanted, 0) || autograd::wants(wanted, 2) ||
                                     autograd::wants(wanted, 3) || !dgates_for_weight.defined();
    TensorList result(4);
    Tensor dgates = dgates_for_weight;
    if (through_time_wanted) {
      TensorList back = through_time(grads);
      dgates = back[0];
      result = {back[0], Tensor(), back[1], back[2]};
    }
    if (weight_wanted) {
      result[1] = weight_gradient(dgates);
      dgates_for_weight = Tensor();
    } else {
      dgates_for_weight = dgates;
    }
    return result;
  }

  // {d gates, d h0, d c0}: the recurrence run backwards, two kernels a step.
  TensorList through_time(const TensorList& grads) const {
    const Tensor &weight_hh = saved_weight_hh.get(), &h0 = saved_h0.get(), &c0 = saved_c0.get();
    const Tensor& hs = hidden.get();
    const int64_t steps = hs.size(0);
    const TensorOptions options = hs.options();
    Backend& backend = backend_for(hs.device());
    auto given_or_zeros = [&](const Tensor& d) { return d.defined() ? contiguous_copy(d) : zeros(h0.shape(), options); };
    Tensor dh = given_or_zeros(grads[1]), dc = given_or_zeros(grads[2]);
    Tensor dc_prev = empty(h0.shape(), options), dh_total = empty(h0.shape(), options);
    const Tensor d_output = grads[0].defined() ? (grads[0].is_contiguous() ? grads[0] : contiguous_copy(grads[0])) : Tensor();
    Tensor dgates = empty(activations.shape(), options);
    for (int64_t t = steps - 1; t >= 0; --t) {
      // What reaches h_t: the output's gradient and the next step's, through weight_hh.
      if (d_output.defined()) backend.binary(BinaryOp::Add, d_output.select(0, t), dh, dh_total, 1.0);
      const Tensor& dh_t = d_output.defined() ? dh_total : dh;
      const Tensor c_before = t > 0 ? cells.select(0, t - 1) : c0;
      backend.lstm_cell_backward(dh_t, dc, activations.select(0, t), c_before, cells.select(0, t), dgates.select(0, t),
                                 dc_prev);
      std::swap(dc, dc_prev);
      matmul_into(backend, dgates.select(0, t), weight_hh, dh);  // d h_{t-1}
    }
    return {dgates, dh, dc};
  }

  // d weight_hh = sum over steps of dgates_t^T h_{t-1}: one product of (4H, T B) by (T B, H).
  Tensor weight_gradient(const Tensor& dgates) const {
    const Tensor &h0 = saved_h0.get(), &hs = hidden.get();
    const int64_t steps = hs.size(0), rows = steps * h0.size(0), hidden_size = h0.size(1);
    const Tensor h_before = cat({h0.unsqueeze(0), hs.narrow(0, 0, steps - 1)}, 0);
    return mm(dgates.view({rows, 4 * hidden_size}).t(), h_before.view({rows, hidden_size}));
  }
};

}  // namespace

LstmLayerOutput lstm_layer(const Tensor& input_gates, const Tensor& weight_hh, const Tensor& h0, const Tensor& c0) {
  LOOM_CHECK(input_gates.defined() && weight_hh.defined() && h0.defined() && c0.defined(),
             "lstm_layer: got an undefined tensor");
  LOOM_CHECK(h0.dim() == 2 && c0.shape() == h0.shape(), "lstm_layer: h0 and c0 must be (B, H), got ", h0.shape(),
             " and ", c0.shape());
  const int64_t batch = h0.size(0), hidden = h0.size(1);
  LOOM_CHECK(input_gates.dim() == 3 && input_gates.size(0) > 0 && input_gates.size(1) == batch &&
                 input_gates.size(2) == 4 * hidden,
             "lstm_layer: input gates must be (T, B, 4H) = (T >= 1, ", batch, ", ", 4 * hidden, ") for h0 of shape ",
             h0.shape(), ", got ", input_gates.shape());
  LOOM_CHECK(weight_hh.shape() == Shape({4 * hidden, hidden}), "lstm_layer: weight_hh must be (4H, H) = ",
             Shape({4 * hidden, hidden}), ", got ", weight_hh.shape());
  const DType dtype = promoted_floating_dtype("lstm_layer", {input_gates, weight_hh, h0, c0});

  // to() and contiguous() return the tensor itself when it already is.
  const Tensor gates = input_gates.to(dtype).contiguous(), w = weight_hh.to(dtype).contiguous();
  const Tensor h_first = h0.to(dtype).contiguous(), c_first = c0.to(dtype).contiguous();
  const int64_t steps = gates.size(0);
  const TensorOptions options = gates.options();
  Tensor hs = empty({steps, batch, hidden}, options), cells = empty({steps, batch, hidden}, options);
  Tensor activations = empty(gates.shape(), options), hidden_gates = empty({batch, 4 * hidden}, options);
  Backend& backend = backend_for(gates.device());
  const Tensor w_t = w.t();
  for (int64_t t = 0; t < steps; ++t) {
    matmul_into(backend, t > 0 ? hs.select(0, t - 1) : h_first, w_t, hidden_gates);
    backend.lstm_cell(gates.select(0, t), hidden_gates, t > 0 ? cells.select(0, t - 1) : c_first, hs.select(0, t),
                      cells.select(0, t), activations.select(0, t));
  }
  // The last state as tensors of their own (an autograd output cannot be a view of another).
  LstmLayerOutput result{hs, contiguous_copy(hs.select(0, steps - 1)), contiguous_copy(cells.select(0, steps - 1))};
  if (autograd::needs_grad({gates, w, h_first, c_first})) {
    auto tape = std::make_shared<LstmLayerTape>(
        LstmLayerTape{autograd::SavedTensor(w), autograd::SavedTensor(h_first), autograd::SavedTensor(c_first),
                      autograd::SavedTensor(hs), cells, activations, /*dgates_for_weight=*/Tensor()});
    // Selective: a split backward takes the recurrence (the gates' gradient)
    // first and weight_hh's product later.
    autograd::record_selective("LstmLayerBackward", {gates, w, h_first, c_first}, {result.output, result.h, result.c},
                               [tape](const TensorList& g, const autograd::InputMask& wanted) {
                                 return tape->backward(g, wanted);
                               });
  }
  return result;
}

}  // namespace loom::nn::functional
