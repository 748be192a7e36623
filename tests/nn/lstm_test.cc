// The fused LSTM cell (functional::lstm_cell, nn::LSTMCell) and layer
// (functional::lstm_layer) against the same steps composed from loom's
// elementwise ops and products, and against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <tuple>
#include <vector>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "nn/nn.h"
#include "tensor/backend.h"
#include "tests/omp_threads.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::max_rel_error;
using testing::values;

// The step as the LSTM computed it before the fused op: eleven ops.
std::pair<Tensor, Tensor> composed_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev) {
  TensorList g = chunk(input_gates + hidden_gates, 4, 1);  // i, f, g, o
  Tensor c = sigmoid(g[1]) * c_prev + sigmoid(g[0]) * tanh(g[2]);
  return {sigmoid(g[3]) * tanh(c), c};
}

// A leaf that requires grad, with t's values.
Tensor leaf(const Tensor& t) { return t.detach().clone().requires_grad_(true); }

struct CellInputs {
  Tensor input_gates, hidden_gates, c_prev;
  TensorList list() const { return {input_gates, hidden_gates, c_prev}; }
};

// Leaves that require grad, from the same values.
CellInputs leaves_like(const CellInputs& in) {
  return {leaf(in.input_gates), leaf(in.hidden_gates), leaf(in.c_prev)};
}

CellInputs random_inputs(int64_t batch, int64_t hidden, DType dtype, uint64_t seed) {
  Generator gen(seed);
  const TensorOptions o{.dtype = dtype};
  // Gates spread over about [-4, 4] so that the sigmoids and tanhs are not all linear.
  return leaves_like({randn({batch, 4 * hidden}, o, &gen) * 1.5, randn({batch, 4 * hidden}, o, &gen) * 1.5,
                      randn({batch, hidden}, o, &gen)});
}

TEST(LstmCell, ValuesAndGradientsEqualTheComposedOps) {
  const CellInputs base = random_inputs(5, 7, kFloat64, 1);
  Generator gen(2);
  const Tensor wh = randn({5, 7}, {.dtype = kFloat64}, &gen), wc = randn({5, 7}, {.dtype = kFloat64}, &gen);
  // Both outputs reach the loss, each, or only one of them (the other's gradient is then absent).
  for (const auto& [use_h, use_c] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
    SCOPED_TRACE(std::string("use_h ") + (use_h ? "1" : "0") + ", use_c " + (use_c ? "1" : "0"));
    const CellInputs fused_in = leaves_like(base), composed_in = leaves_like(base);
    auto [h, c] = nn::functional::lstm_cell(fused_in.input_gates, fused_in.hidden_gates, fused_in.c_prev);
    auto [h_ref, c_ref] = composed_cell(composed_in.input_gates, composed_in.hidden_gates, composed_in.c_prev);
    EXPECT_LT(max_rel_error(h, h_ref), 1e-14);
    EXPECT_LT(max_rel_error(c, c_ref), 1e-14);
    auto loss = [&](const Tensor& h, const Tensor& c) {
      if (!use_c) return (h * wh).sum();
      if (!use_h) return (c * wc).sum();
      return (h * wh).sum() + (c * wc).sum();
    };
    autograd::backward({loss(h, c)});
    autograd::backward({loss(h_ref, c_ref)});
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE("input " + std::to_string(i));
      EXPECT_LT(max_rel_error(fused_in.list()[i].grad(), composed_in.list()[i].grad()), 1e-13);
    }
  }
}

TEST(LstmCell, GradientsMatchFiniteDifferences) {
  const CellInputs in = random_inputs(3, 4, kFloat64, 3);
  autograd::GradcheckResult r = autograd::gradcheck(
      [](const TensorList& t) {
        auto [h, c] = nn::functional::lstm_cell(t[0], t[1], t[2]);
        return cat({h, c * 0.5}, 1);  // both outputs, weighted apart
      },
      in.list());
  EXPECT_TRUE(r.ok) << r.message;
}

// Rows split across threads; a strided (transposed) gate input is made contiguous first.
TEST(LstmCell, WideBatchesAndStridedInputsGiveTheComposedValues) {
  const CellInputs in = random_inputs(300, 64, kFloat32, 4);
  const Tensor strided_gates = in.input_gates.t().contiguous().t();
  ASSERT_FALSE(strided_gates.is_contiguous());
  auto [h, c] = nn::functional::lstm_cell(strided_gates, in.hidden_gates, in.c_prev);
  auto [h_ref, c_ref] = composed_cell(in.input_gates, in.hidden_gates, in.c_prev);
  // float32: the fused sum of the two gate inputs is the composed one; the
  // activations differ by Eigen's vectorised logistic/tanh rounding only.
  EXPECT_LT(max_rel_error(h, h_ref), 1e-6);
  EXPECT_LT(max_rel_error(c, c_ref), 1e-6);
}

// float32 rows run in AVX2 registers, 8 hidden units at a time, the last
// partial vector under a mask; float64 takes Eigen's expressions. 37 hidden
// units leave a tail of 5 in each gate's quarter, and a few gates far out
// (+-30, +-100) saturate the logistic and tanh, whose exponential is
// clamped. Forward and backward against the float64 cell's.
TEST(LstmCell, Float32RowsMatchFloat64) {
  CellInputs in = random_inputs(3, 37, kFloat64, 8);
  auto with = [](const Tensor& t, std::vector<std::pair<int64_t, double>> changes) {
    std::vector<double> v = values(t);
    for (const auto& [at, value] : changes) v[at] = value;
    return from_vector(v, t.shape(), t.options());
  };
  in.input_gates = with(in.input_gates, {{3, 30.0}, {148 + 40, -30.0}});
  in.hidden_gates = with(in.hidden_gates, {{2 * 148 + 80, 100.0}, {147, -100.0}});
  Generator gen(9);
  const Tensor wh = randn({3, 37}, {.dtype = kFloat64}, &gen), wc = randn({3, 37}, {.dtype = kFloat64}, &gen);
  auto run = [&](DType dtype) {
    const CellInputs cast = leaves_like({in.input_gates.to(dtype), in.hidden_gates.to(dtype), in.c_prev.to(dtype)});
    auto [h, c] = nn::functional::lstm_cell(cast.input_gates, cast.hidden_gates, cast.c_prev);
    autograd::backward({(h * wh.to(dtype)).sum() + (c * wc.to(dtype)).sum()});
    return TensorList{h, c, cast.input_gates.grad(), cast.hidden_gates.grad(), cast.c_prev.grad()};
  };
  const TensorList single = run(kFloat32), exact = run(kFloat64);
  const char* names[] = {"h", "c", "d input_gates", "d hidden_gates", "d c_prev"};
  for (int k = 0; k < 5; ++k) {
    SCOPED_TRACE(names[k]);
    EXPECT_LT(max_rel_error(single[k], exact[k]), 2e-6);
  }
}

// 16-bit tensors compute in float32 and round once: the float32 cell's
// results, rounded, within one unit in the last place of rounding
// differences between the float32 paths.
TEST(LstmCell, Bfloat16RoundsTheFloat32ResultOnce) {
  const CellInputs wide = random_inputs(4, 16, kFloat32, 5);
  const CellInputs narrow{wide.input_gates.detach().to(kBFloat16), wide.hidden_gates.detach().to(kBFloat16),
                          wide.c_prev.detach().to(kBFloat16)};
  auto [h, c] = nn::functional::lstm_cell(narrow.input_gates, narrow.hidden_gates, narrow.c_prev);
  ASSERT_EQ(h.dtype(), kBFloat16);
  auto [h_ref, c_ref] = nn::functional::lstm_cell(narrow.input_gates.to(kFloat32), narrow.hidden_gates.to(kFloat32),
                                                  narrow.c_prev.to(kFloat32));
  EXPECT_EQ(values(h), values(h_ref.to(kBFloat16)));
  EXPECT_EQ(values(c), values(c_ref.to(kBFloat16)));
}

TEST(LstmCell, MixedDtypesPromote) {
  const CellInputs in = random_inputs(2, 3, kFloat32, 6);
  auto [h, c] = nn::functional::lstm_cell(in.input_gates, in.hidden_gates.to(kBFloat16), in.c_prev);
  EXPECT_EQ(h.dtype(), kFloat32);
  auto [h_ref, c_ref] = nn::functional::lstm_cell(in.input_gates, in.hidden_gates.to(kBFloat16).to(kFloat32), in.c_prev);
  EXPECT_EQ(values(h), values(h_ref));
  autograd::backward({c.sum()});
  EXPECT_EQ(in.hidden_gates.grad().dtype(), kFloat32);
}

TEST(LstmCell, BadArgumentsAreNamed) {
  const CellInputs in = random_inputs(2, 3, kFloat32, 7);
  EXPECT_THROW_MSG(nn::functional::lstm_cell(in.input_gates, in.hidden_gates, in.c_prev.narrow(1, 0, 2)),
                   "lstm_cell: gates must be (B, 4H) = [2, 8]");
  EXPECT_THROW_MSG(nn::functional::lstm_cell(in.input_gates, in.hidden_gates.narrow(0, 0, 1), in.c_prev),
                   "got [2, 12] and [1, 12]");
  EXPECT_THROW_MSG(nn::functional::lstm_cell(in.input_gates, in.hidden_gates, in.c_prev.flatten()),
                   "lstm_cell: c_prev must be (B, H)");
  const Tensor ints = zeros({2, 12}, {.dtype = kInt64});
  EXPECT_THROW_MSG(nn::functional::lstm_cell(ints, ints, zeros({2, 3}, {.dtype = kInt64})),
                   "lstm_cell: expected floating-point tensors");
  EXPECT_THROW_MSG(nn::functional::lstm_cell(Tensor(), in.hidden_gates, in.c_prev), "undefined");
}

struct LayerInputs {
  Tensor gates, weight_hh, h0, c0;
  TensorList list() const { return {gates, weight_hh, h0, c0}; }
};

LayerInputs random_layer_inputs(int64_t steps, int64_t batch, int64_t hidden, DType dtype, uint64_t seed) {
  Generator gen(seed);
  const TensorOptions o{.dtype = dtype};
  return {leaf(randn({steps, batch, 4 * hidden}, o, &gen) * 1.5), leaf(randn({4 * hidden, hidden}, o, &gen) * 0.5),
          leaf(randn({batch, hidden}, o, &gen)), leaf(randn({batch, hidden}, o, &gen))};
}

LayerInputs leaves_like(const LayerInputs& in) {
  return {leaf(in.gates), leaf(in.weight_hh), leaf(in.h0), leaf(in.c0)};
}

// The layer as nn::LSTM composed it before lstm_layer: a product and a cell per step.
nn::functional::LstmLayerOutput composed_layer(const LayerInputs& in) {
  Tensor h = in.h0, c = in.c0;
  TensorList outputs;
  for (const Tensor& gates_t : unbind(in.gates, 0)) {
    std::tie(h, c) = composed_cell(gates_t, matmul(h, in.weight_hh.t()), c);
    outputs.push_back(h);
  }
  return {stack(outputs, 0), h, c};
}

TEST(LstmLayer, ValuesAndGradientsEqualTheComposedSteps) {
  const LayerInputs base = random_layer_inputs(5, 3, 4, kFloat64, 11);
  Generator gen(12);
  const Tensor w_out = randn({5, 3, 4}, {.dtype = kFloat64}, &gen), w_h = randn({3, 4}, {.dtype = kFloat64}, &gen),
               w_c = randn({3, 4}, {.dtype = kFloat64}, &gen);
  // Which outputs reach the loss: all, the sequence only (h_T and c_T get no gradient), the final state only.
  struct Use {
    bool output, h, c;
  };
  for (const Use use : {Use{true, true, true}, Use{true, false, false}, Use{false, true, true}, Use{false, false, true}}) {
    SCOPED_TRACE(::testing::Message() << "output " << use.output << ", h " << use.h << ", c " << use.c);
    const LayerInputs fused_in = leaves_like(base), composed_in = leaves_like(base);
    auto fused = nn::functional::lstm_layer(fused_in.gates, fused_in.weight_hh, fused_in.h0, fused_in.c0);
    auto composed = composed_layer(composed_in);
    EXPECT_LT(max_rel_error(fused.output, composed.output), 1e-14);
    EXPECT_LT(max_rel_error(fused.h, composed.h), 1e-14);
    EXPECT_LT(max_rel_error(fused.c, composed.c), 1e-14);
    auto loss = [&](const nn::functional::LstmLayerOutput& r) {
      Tensor l = zeros({}, {.dtype = kFloat64});
      if (use.output) l = l + (r.output * w_out).sum();
      if (use.h) l = l + (r.h * w_h).sum();
      if (use.c) l = l + (r.c * w_c).sum();
      return l;
    };
    autograd::backward({loss(fused)});
    autograd::backward({loss(composed)});
    const char* names[] = {"gates", "weight_hh", "h0", "c0"};
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(names[i]);
      EXPECT_LT(max_rel_error(fused_in.list()[i].grad(), composed_in.list()[i].grad()), 1e-13);
    }
  }
}

TEST(LstmLayer, GradientsMatchFiniteDifferences) {
  for (int64_t steps : {1, 4}) {
    const LayerInputs in = random_layer_inputs(steps, 2, 3, kFloat64, 13 + steps);
    autograd::GradcheckResult r = autograd::gradcheck(
        [](const TensorList& t) {
          auto out = nn::functional::lstm_layer(t[0], t[1], t[2], t[3]);
          return cat({out.output.flatten(), out.h.flatten() * 0.5, out.c.flatten() * 2.0});
        },
        in.list());
    EXPECT_TRUE(r.ok) << "steps " << steps << ": " << r.message;
  }
}

// float32 over many rows (the cell's rows split across threads); the
// mixed-dtype state is promoted.
TEST(LstmLayer, Float32AndMixedDtypesGiveTheComposedValues) {
  const LayerInputs in = random_layer_inputs(16, 70, 32, kFloat32, 15);
  auto fused = nn::functional::lstm_layer(in.gates, in.weight_hh, in.h0, in.c0);
  auto composed = composed_layer(in);
  EXPECT_LT(max_rel_error(fused.output, composed.output), 1e-5);
  EXPECT_LT(max_rel_error(fused.c, composed.c), 1e-5);
  auto mixed = nn::functional::lstm_layer(in.gates, in.weight_hh, in.h0.to(kFloat64), in.c0);
  EXPECT_EQ(mixed.output.dtype(), kFloat64);
}

// The CPU runs the recurrence in blocks of batch rows, one block a thread,
// when a row's steps are worth a thread (tensor/cpu/row_blocks.cc).
std::vector<std::pair<int64_t, int64_t>> cpu_row_blocks(int threads, int64_t rows, int64_t work_per_row) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  std::mutex mutex;
  testing::on_omp_threads(threads, [&] {
    backend_for(Device::cpu()).for_row_blocks(rows, work_per_row, [&](int64_t begin, int64_t end) {
      std::lock_guard<std::mutex> lock(mutex);
      blocks.emplace_back(begin, end);
    });
  });
  std::sort(blocks.begin(), blocks.end());
  return blocks;
}

TEST(LstmLayer, CpuSplitsTheBatchIntoOneBlockAThreadWhenWorthIt) {
  using Blocks = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(cpu_row_blocks(2, 9, 1 << 20), (Blocks{{0, 4}, {4, 9}}));
  EXPECT_EQ(cpu_row_blocks(4, 9, 1 << 19), (Blocks{{0, 2}, {2, 4}, {4, 6}, {6, 9}}));  // two rows a block at least
  EXPECT_EQ(cpu_row_blocks(2, 9, 1000), (Blocks{{0, 9}}));  // too little work for a second thread
  EXPECT_EQ(cpu_row_blocks(1, 9, 1 << 20), (Blocks{{0, 9}}));
  EXPECT_EQ(cpu_row_blocks(2, 0, 1 << 20), Blocks{});
}

// Three threads over 7 rows of 64 steps (each row a block's worth): the
// blocks' values and gradients are the composed steps' over the whole batch,
// as are the one-thread run's.
TEST(LstmLayer, BatchRowsInBlocksOnThreadsGiveTheComposedSteps) {
  const LayerInputs base = random_layer_inputs(64, 7, 64, kFloat64, 19);
  ASSERT_EQ(cpu_row_blocks(3, 7, 64 * 4 * 64 * 64).size(), 3u);
  Generator gen(20);
  const Tensor w_out = randn({64, 7, 64}, {.dtype = kFloat64}, &gen), w_c = randn({7, 64}, {.dtype = kFloat64}, &gen);
  const LayerInputs composed_in = leaves_like(base);
  auto composed = composed_layer(composed_in);
  autograd::backward({(composed.output * w_out).sum() + (composed.c * w_c).sum()});
  for (int threads : {3, 1}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    const LayerInputs fused_in = leaves_like(base);
    testing::on_omp_threads(threads, [&] {
      auto fused = nn::functional::lstm_layer(fused_in.gates, fused_in.weight_hh, fused_in.h0, fused_in.c0);
      EXPECT_LT(max_rel_error(fused.output, composed.output), 1e-13);
      EXPECT_LT(max_rel_error(fused.h, composed.h), 1e-13);
      EXPECT_LT(max_rel_error(fused.c, composed.c), 1e-13);
      autograd::backward({(fused.output * w_out).sum() + (fused.c * w_c).sum()});
    });
    const char* names[] = {"gates", "weight_hh", "h0", "c0"};
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(names[i]);
      EXPECT_LT(max_rel_error(fused_in.list()[i].grad(), composed_in.list()[i].grad()), 1e-12);
    }
  }
}

TEST(LstmLayer, BadArgumentsAreNamed) {
  const LayerInputs in = random_layer_inputs(3, 2, 4, kFloat32, 16);
  EXPECT_THROW_MSG(nn::functional::lstm_layer(in.gates.narrow(0, 0, 0), in.weight_hh, in.h0, in.c0),
                   "lstm_layer: input gates must be (T, B, 4H) = (T >= 1, 2, 16)");
  EXPECT_THROW_MSG(nn::functional::lstm_layer(in.gates, in.weight_hh.t(), in.h0, in.c0),
                   "lstm_layer: weight_hh must be (4H, H) = [16, 4], got [4, 16]");
  EXPECT_THROW_MSG(nn::functional::lstm_layer(in.gates, in.weight_hh, in.h0, in.c0.narrow(0, 0, 1)),
                   "lstm_layer: h0 and c0 must be (B, H)");
  EXPECT_THROW_MSG(nn::functional::lstm_layer(in.gates, in.weight_hh, in.h0.narrow(0, 0, 1), in.c0.narrow(0, 0, 1)),
                   "for h0 of shape [1, 4], got [3, 2, 16]");
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4});
  EXPECT_THROW_MSG(lstm->forward(zeros({0, 2, 3}), {}), "LSTM: the input has no time steps");
}

// The backward reads weight_hh, h0 and c0 again: changing one in place
// between forward and backward is an error, as it is for the composed
// steps, not a silently wrong gradient.
TEST(LstmLayer, InPlaceChangeOfAnInputTheBackwardReadsIsAnError) {
  for (int changed = 1; changed < 4; ++changed) {
    SCOPED_TRACE(changed);
    LayerInputs in = random_layer_inputs(3, 2, 4, kFloat64, 17);
    TensorList inputs = in.list();
    inputs[changed] = inputs[changed].detach().clone();  // not a leaf that requires grad, so add_ is allowed
    auto out = nn::functional::lstm_layer(inputs[0], inputs[1], inputs[2], inputs[3]);
    inputs[changed].add_(1.0);
    EXPECT_THROW_MSG(autograd::backward({out.output.sum()}), "modified by an in-place operation");
  }
}

// A batch of zero rows: empty outputs, and zero gradients for weight_hh.
TEST(LstmLayer, EmptyBatch) {
  const LayerInputs in = random_layer_inputs(3, 0, 4, kFloat64, 18);
  auto out = nn::functional::lstm_layer(in.gates, in.weight_hh, in.h0, in.c0);
  EXPECT_EQ(out.output.shape(), Shape({3, 0, 4}));
  autograd::backward({out.output.sum() + out.c.sum()});
  EXPECT_EQ(in.weight_hh.grad().abs().sum().item(), 0.0);
}

// nn::LSTMCell's step written out with its parameters.
TEST(LSTMCell, StepIsTheGateEquationsOfItsParameters) {
  manual_seed(8);
  nn::LSTMCell cell({.input_size = 3, .hidden_size = 4});
  Generator gen(9);
  const Tensor x = randn({2, 3}, {}, &gen), h0 = randn({2, 4}, {}, &gen), c0 = randn({2, 4}, {}, &gen);
  nn::LSTMState s = cell->forward(x, {h0, c0});
  auto [h_ref, c_ref] =
      composed_cell(matmul(x, cell->weight_ih.t()) + cell->bias_ih, matmul(h0, cell->weight_hh.t()) + cell->bias_hh, c0);
  EXPECT_LT(max_rel_error(s.h, h_ref), 1e-6);
  EXPECT_LT(max_rel_error(s.c, c_ref), 1e-6);
  // A missing state is zeros; an unbatched input gives unbatched results.
  nn::LSTMState from_zeros = cell->forward(x, {});
  nn::LSTMState explicit_zeros = cell->forward(x, {zeros({2, 4}), zeros({2, 4})});
  EXPECT_EQ(values(from_zeros.h), values(explicit_zeros.h));
  nn::LSTMState single = cell->forward(x.select(0, 1), {h0.select(0, 1), c0.select(0, 1)});
  EXPECT_EQ(single.h.shape(), Shape({4}));
  EXPECT_LT(max_rel_error(single.c, s.c.select(0, 1)), 1e-6);
  EXPECT_EQ(cell->named_parameters().size(), 4u);
  EXPECT_THROW_MSG(cell->forward(zeros({2, 5}), {}), "LSTMCell: input has 5 features, expected 3");
  EXPECT_THROW_MSG(cell->forward(x, {zeros({3, 4}), Tensor()}), "LSTMCell: state of shape [3, 4] does not match [2, 4]");
}

// Stepping an LSTMCell through a sequence is one layer of nn::LSTM with the same weights.
TEST(LSTMCell, SteppedThroughASequenceIsAOneLayerLstm) {
  manual_seed(10);
  nn::LSTM lstm({.input_size = 3, .hidden_size = 5});
  nn::LSTMCell cell({.input_size = 3, .hidden_size = 5});
  for (auto [to, from] : {std::pair{cell->weight_ih, lstm->weight_ih[0]}, std::pair{cell->weight_hh, lstm->weight_hh[0]},
                          std::pair{cell->bias_ih, lstm->bias_ih[0]}, std::pair{cell->bias_hh, lstm->bias_hh[0]}}) {
    NoGradGuard no_grad;
    to.copy_(from);
  }
  const Tensor x = randn({6, 2, 3});  // (T, B, F)
  nn::LSTMOutput out = lstm->forward(x, {});
  nn::LSTMState s;
  for (const Tensor& x_t : unbind(x, 0)) s = cell->forward(x_t, s);
  EXPECT_LT(max_rel_error(s.h, out.state.h.select(0, 0)), 1e-6);
  EXPECT_LT(max_rel_error(s.c, out.state.c.select(0, 0)), 1e-6);
}

}  // namespace
}  // namespace loom
