// One LSTM layer over a whole sequence as one autograd op. The composed
// layer recorded a product, a cell, an unbind slice and a stack entry per
// step, and backward ran them node by node, with weight_hh's gradient
// summed from one small product per step. Here the forward is a loop of two
// kernels per step writing straight into the output; the backward runs
// through time in a loop of two kernels per step, and weight_hh's gradient
// is a single product over all steps (as cuDNN and PyTorch's fused RNNs do).
#include <memory>

#include "autograd/node.h"
#include "nn/functional.h"
#include "nn/functional/operands.h"
#include "tensor/flop_counter.h"

namespace loom::nn::functional {
namespace {

// The recurrence's products for `steps` steps of a (batch, hidden) state,
// counted once for the whole batch: they bypass mm (each is a prepared
// product by the recurrent weight), and the row blocks that run them may be
// on other threads, where a FlopCounter's scope does not reach.
void count_recurrence_flops(int64_t steps, int64_t batch, int64_t hidden) {
  count_flops("mm", steps * flops::mm(batch, hidden, 4 * hidden));
}

// A (T, B, N) tensor as (T B, N), so that a step's block of batch rows is
// one narrow: one view to make per operand and step, not two.
Tensor steps_as_rows(const Tensor& x) { return x.view({x.size(0) * x.size(1), x.size(2)}); }

// Batch rows [begin, end) of step t of a (T B, N) tensor (t = 0 and a
// (B, N) tensor: rows of that tensor).
Tensor step_rows(const Tensor& x, int64_t batch, int64_t t, int64_t begin, int64_t end) {
  return x.narrow(0, t * batch + begin, end - begin);
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
  // Batch rows never meet here either: each block of rows runs every step.
  TensorList through_time(const TensorList& grads) const {
    // Detached: the blocks take views on other threads, where grad mode is on.
    const Tensor weight_hh = saved_weight_hh.get().detach(), h0 = saved_h0.get().detach();
    const Tensor c0 = saved_c0.get().detach(), hs = hidden.get().detach();
    const int64_t steps = hs.size(0), batch = h0.size(0), hidden_size = h0.size(1);
    const TensorOptions options = hs.options();
    Backend& backend = backend_for(hs.device());
    auto given_or_zeros = [&](const Tensor& d) {
      return d.defined() ? contiguous_copy(d.detach()) : zeros(h0.shape(), options);
    };
    Tensor dh = given_or_zeros(grads[1]), dc = given_or_zeros(grads[2]);
    Tensor dc_prev = empty(h0.shape(), options), dh_total = empty(h0.shape(), options);
    const Tensor d_output = grads[0].defined() ? grads[0].detach().contiguous() : Tensor();
    Tensor dgates = empty(activations.shape(), options);
    // Every step multiplies by weight_hh: prepared (on the CPU, packed) once.
    const std::unique_ptr<Backend::PreparedProduct> by_weight = backend.prepare_product(weight_hh);
    const Tensor dgates_flat = steps_as_rows(dgates), cells_flat = steps_as_rows(cells);
    const Tensor activations_flat = steps_as_rows(activations);
    const Tensor d_output_flat = d_output.defined() ? steps_as_rows(d_output) : Tensor();
    backend.for_row_blocks(batch, steps * 4 * hidden_size * hidden_size, [&](int64_t b0, int64_t b1) {
      auto rows = [&](const Tensor& x, int64_t t) { return step_rows(x, batch, t, b0, b1); };
      const Tensor dh_b = rows(dh, 0), dh_total_b = rows(dh_total, 0);
      Tensor dc_b = rows(dc, 0), dc_prev_b = rows(dc_prev, 0);
      for (int64_t t = steps - 1; t >= 0; --t) {
        // What reaches h_t: the output's gradient and the next step's, through weight_hh.
        if (d_output.defined()) backend.binary(BinaryOp::Add, rows(d_output_flat, t), dh_b, dh_total_b, 1.0);
        const Tensor& dh_t = d_output.defined() ? dh_total_b : dh_b;
        const Tensor c_before = t > 0 ? rows(cells_flat, t - 1) : rows(c0, 0);
        const Tensor dgates_t = rows(dgates_flat, t);
        backend.lstm_cell_backward(dh_t, dc_b, rows(activations_flat, t), c_before, rows(cells_flat, t), dgates_t,
                                   dc_prev_b);
        std::swap(dc_b, dc_prev_b);
        by_weight->run(dgates_t, dh_b);  // d h_{t-1}
      }
    });
    count_recurrence_flops(steps, batch, hidden_size);
    // Every block swapped its two cell gradients once a step.
    if (steps % 2 == 1) std::swap(dc, dc_prev);
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
  // Batch rows never meet in the recurrence: each block of rows runs every
  // step alone. Detached: the blocks take views on other threads, where grad
  // mode is on.
  const Tensor gates_data = gates.detach();
  // Every step multiplies by weight_hh^T: prepared (on the CPU, packed) once.
  const std::unique_ptr<Backend::PreparedProduct> by_weight_t = backend.prepare_product(w.detach().t());
  const Tensor h_data = h_first.detach(), c_data = c_first.detach();
  const Tensor gates_flat = steps_as_rows(gates_data), hs_flat = steps_as_rows(hs);
  const Tensor cells_flat = steps_as_rows(cells), activations_flat = steps_as_rows(activations);
  backend.for_row_blocks(batch, steps * 4 * hidden * hidden, [&](int64_t b0, int64_t b1) {
    auto rows = [&](const Tensor& x, int64_t t) { return step_rows(x, batch, t, b0, b1); };
    const Tensor hidden_gates_b = rows(hidden_gates, 0);
    for (int64_t t = 0; t < steps; ++t) {
      by_weight_t->run(t > 0 ? rows(hs_flat, t - 1) : rows(h_data, 0), hidden_gates_b);
      backend.lstm_cell(rows(gates_flat, t), hidden_gates_b, t > 0 ? rows(cells_flat, t - 1) : rows(c_data, 0),
                        rows(hs_flat, t), rows(cells_flat, t), rows(activations_flat, t));
    }
  });
  count_recurrence_flops(steps, batch, hidden);
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
