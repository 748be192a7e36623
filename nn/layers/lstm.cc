#include "nn/layers/lstm.h"

#include <cmath>

#include "nn/functional.h"
#include "nn/init.h"

namespace loom::nn {

LSTMImpl::LSTMImpl(const LSTMOptions& o) : Cloneable("LSTM"), options(o) {
  LOOM_CHECK(o.input_size > 0 && o.hidden_size > 0 && o.num_layers > 0,
             "LSTM: input_size, hidden_size and num_layers must be positive");
  reset();
}

void LSTMImpl::reset() {
  const int64_t h = options.hidden_size;
  const double bound = 1.0 / std::sqrt(static_cast<double>(h));
  weight_ih.clear();
  weight_hh.clear();
  bias_ih.clear();
  bias_hh.clear();
  for (int64_t l = 0; l < options.num_layers; ++l) {
    const std::string s = std::to_string(l);
    const int64_t in = l == 0 ? options.input_size : h;
    weight_ih.push_back(register_parameter("weight_ih_l" + s, empty({4 * h, in})));
    weight_hh.push_back(register_parameter("weight_hh_l" + s, empty({4 * h, h})));
    if (options.bias) {
      bias_ih.push_back(register_parameter("bias_ih_l" + s, empty({4 * h})));
      bias_hh.push_back(register_parameter("bias_hh_l" + s, empty({4 * h})));
    }
  }
  for (const Tensor& p : parameters(false)) init::uniform_(p, -bound, bound);
}

LSTMOutput LSTMImpl::forward(const Tensor& x_in, const LSTMState& state) {
  LOOM_CHECK(x_in.dim() == 3, "LSTM: expected a 3-D input (", options.batch_first ? "B, T, F" : "T, B, F",
             "), got shape ", x_in.shape());
  LOOM_CHECK(x_in.size(2) == options.input_size, "LSTM: input has ", x_in.size(2), " features, expected ",
             options.input_size);
  Tensor x = options.batch_first ? x_in.transpose(0, 1) : x_in;  // (T, B, F)
  LOOM_CHECK(x.size(0) > 0, "LSTM: the input has no time steps (shape ", x_in.shape(), ")");
  const int64_t batch = x.size(1), h = options.hidden_size;
  const Shape state_shape{options.num_layers, batch, h};
  for (const Tensor* s : {&state.h, &state.c})
    LOOM_CHECK(!s->defined() || s->shape() == state_shape, "LSTM: initial state of shape ", s->shape(),
               " does not match (num_layers, B, hidden) = ", state_shape);

  TensorList final_h, final_c;
  Tensor layer_input = x;
  for (int64_t l = 0; l < options.num_layers; ++l) {
    // Input projection of every step at once, both biases with it: (T, B, 4H).
    // (Adding bias_hh to the projection was a pass over all of it each way;
    // the two (4H) biases add up first.)
    Tensor projected = functional::linear(layer_input, weight_ih[l], options.bias ? bias_ih[l] + bias_hh[l] : Tensor());
    Tensor h0 = state.h.defined() ? state.h.select(0, l) : zeros({batch, h}, x.options());
    Tensor c0 = state.c.defined() ? state.c.select(0, l) : zeros({batch, h}, x.options());
    functional::LstmLayerOutput out = functional::lstm_layer(projected, weight_hh[l], h0, c0);
    layer_input = out.output;
    final_h.push_back(out.h);
    final_c.push_back(out.c);
  }
  Tensor output = options.batch_first ? layer_input.transpose(0, 1) : layer_input;
  return {output, {stack(final_h, 0), stack(final_c, 0)}};
}

LSTMCellImpl::LSTMCellImpl(const LSTMCellOptions& o) : Cloneable("LSTMCell"), options(o) {
  LOOM_CHECK(o.input_size > 0 && o.hidden_size > 0, "LSTMCell: input_size and hidden_size must be positive");
  reset();
}

void LSTMCellImpl::reset() {
  const int64_t h = options.hidden_size;
  weight_ih = register_parameter("weight_ih", empty({4 * h, options.input_size}));
  weight_hh = register_parameter("weight_hh", empty({4 * h, h}));
  if (options.bias) {
    bias_ih = register_parameter("bias_ih", empty({4 * h}));
    bias_hh = register_parameter("bias_hh", empty({4 * h}));
  }
  const double bound = 1.0 / std::sqrt(static_cast<double>(h));
  for (const Tensor& p : parameters(false)) init::uniform_(p, -bound, bound);
}

LSTMState LSTMCellImpl::forward(const Tensor& x_in, const LSTMState& state) {
  LOOM_CHECK(x_in.dim() == 1 || x_in.dim() == 2, "LSTMCell: expected an input of shape (B, F) or (F), got ",
             x_in.shape());
  LOOM_CHECK(x_in.size(-1) == options.input_size, "LSTMCell: input has ", x_in.size(-1), " features, expected ",
             options.input_size);
  const bool unbatched = x_in.dim() == 1;
  const Tensor x = unbatched ? x_in.unsqueeze(0) : x_in;
  const Shape state_shape = unbatched ? Shape{options.hidden_size} : Shape{x.size(0), options.hidden_size};
  auto initial = [&](const Tensor& s) {
    if (!s.defined()) return zeros({x.size(0), options.hidden_size}, x.options());
    LOOM_CHECK(s.shape() == state_shape, "LSTMCell: state of shape ", s.shape(), " does not match ", state_shape);
    return unbatched ? s.unsqueeze(0) : s;
  };
  auto [h, c] = functional::lstm_cell(functional::linear(x, weight_ih, bias_ih),
                                      functional::linear(initial(state.h), weight_hh, bias_hh), initial(state.c));
  if (unbatched) return {h.squeeze(0), c.squeeze(0)};
  return {h, c};
}

void LSTMCellImpl::pretty_print(std::ostream& out) const {
  out << "LSTMCell(" << options.input_size << ", " << options.hidden_size << ")";
}

void LSTMImpl::pretty_print(std::ostream& out) const {
  out << "LSTM(" << options.input_size << ", " << options.hidden_size << ", num_layers=" << options.num_layers
      << ", batch_first=" << (options.batch_first ? "true" : "false") << ")";
}

}  // namespace loom::nn
