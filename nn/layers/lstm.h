// LSTM: a multi-layer long short-term memory network (PyTorch's nn.LSTM),
// and LSTMCell, one step of one layer (nn.LSTMCell).
//
//   nn::LSTM lstm({.input_size = 64, .hidden_size = 128, .num_layers = 2, .batch_first = true});
//   nn::LSTMOutput out = lstm->forward(x, {});   // x (B, T, 64): out.output (B, T, 128),
//                                                // out.state.h / .c (2, B, 128)
//
// Each step computes, with gates in PyTorch's order (i, f, g, o):
//   i, f, g, o = x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh
//   c_t = sigmoid(f) c_{t-1} + sigmoid(i) tanh(g),   h_t = sigmoid(o) tanh(c_t)
// The input projection of all steps is one matrix product per layer, and
// the recurrence one op (functional::lstm_layer: two kernels per step each
// way, weight_hh's gradient one product over all steps).
#pragma once

#include "nn/module.h"

namespace loom::nn {

struct LSTMOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // input and output (B, T, F) instead of (T, B, F)
};

struct LSTMState {
  // LSTM: (num_layers, B, hidden_size); LSTMCell: (B, hidden_size). Undefined means zeros.
  Tensor h, c;
};

struct LSTMOutput {
  Tensor output;  // the last layer's h at every step
  LSTMState state;
};

class LSTMImpl : public Cloneable<LSTMImpl> {
 public:
  using Options = LSTMOptions;
  explicit LSTMImpl(const LSTMOptions& options);

  void reset() override;  // every weight and bias U(-1/sqrt(hidden), 1/sqrt(hidden)), as PyTorch
  LSTMOutput forward(const Tensor& x, const LSTMState& state);
  Tensor forward(const Tensor& x) override { return forward(x, LSTMState{}).output; }
  void pretty_print(std::ostream& out) const override;

  LSTMOptions options;
  // Per layer l, named weight_ih_l{l}, weight_hh_l{l}, bias_ih_l{l}, bias_hh_l{l}.
  std::vector<Tensor> weight_ih, weight_hh, bias_ih, bias_hh;
};
LOOM_MODULE(LSTM);

// LSTMCell: one step of one layer (PyTorch's nn.LSTMCell), for loops the
// caller writes: decoders, or steps that depend on the previous output.
//
//   nn::LSTMCell cell({.input_size = 64, .hidden_size = 128});
//   nn::LSTMState s;                                // zeros
//   for (const Tensor& x_t : unbind(x, 0)) s = cell->forward(x_t, s);   // x_t (B, 64): s.h, s.c (B, 128)
struct LSTMCellOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  bool bias = true;
};

class LSTMCellImpl : public Cloneable<LSTMCellImpl> {
 public:
  using Options = LSTMCellOptions;
  explicit LSTMCellImpl(const LSTMCellOptions& options);

  void reset() override;  // U(-1/sqrt(hidden), 1/sqrt(hidden)), as PyTorch
  // x (B, input_size) or (input_size); the state and the result match it: (B, hidden_size) or (hidden_size).
  LSTMState forward(const Tensor& x, const LSTMState& state);
  Tensor forward(const Tensor& x) override { return forward(x, LSTMState{}).h; }
  void pretty_print(std::ostream& out) const override;

  LSTMCellOptions options;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;  // (4H, input), (4H, H), (4H), (4H); gates i, f, g, o
};
LOOM_MODULE(LSTMCell);

}  // namespace loom::nn
