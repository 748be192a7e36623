// The split backward of zero-bubble pipelines: input gradients first, the
// weights' later, together equal to one backward().
#include "autograd/split_backward.h"

#include <gtest/gtest.h>

#include <functional>

#include "autograd/checkpoint.h"
#include "autograd/engine.h"
#include "nn/functional.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::leaf64;
using testing::max_rel_error;

// A two-layer MLP with a conv-free path and a bias: y = tanh(x W1^T + b1) W2^T + b2.
struct Mlp {
  Tensor w1 = leaf64({5, 4}, 1), b1 = leaf64({5}, 2), w2 = leaf64({3, 5}, 3), b2 = leaf64({3}, 4);
  TensorList parameters() const { return {w1, b1, w2, b2}; }
  Tensor operator()(const Tensor& x) const {
    return nn::functional::linear(tanh(nn::functional::linear(x, w1, b1)), w2, b2);
  }
};

// Each parameter's .grad() (cloned) after one ordinary backward.
TensorList reference_gradients(const TensorList& parameters, const std::function<Tensor()>& loss,
                               const Tensor& input, Tensor* input_grad) {
  loss().backward();
  TensorList grads;
  for (const Tensor& p : parameters) {
    grads.push_back(p.grad().clone());
    p.set_grad(Tensor());
  }
  *input_grad = input.grad().clone();
  input.set_grad(Tensor());
  return grads;
}

// Splits loss()'s backward at x and holds it to one ordinary backward: x's
// gradient bitwise (the same ops in the same order), no parameter's gradient
// before compute(), each within 1e-14 after it.
void expect_split_equals_one_backward(const TensorList& parameters, const std::function<Tensor()>& loss,
                                      const Tensor& x) {
  Tensor expected_dx;
  const TensorList expected = reference_gradients(parameters, loss, x, &expected_dx);
  autograd::WeightGradients rest = autograd::backward_inputs_first({loss()}, {}, {x});
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(max_rel_error(x.grad(), expected_dx), 0.0) << "the same ops in the same order";
  for (size_t i = 0; i < parameters.size(); ++i)
    EXPECT_FALSE(parameters[i].grad().defined()) << "parameter " << i << "'s gradient came early";
  EXPECT_TRUE(rest.pending());
  rest.compute();
  EXPECT_FALSE(rest.pending());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_LT(max_rel_error(parameters[i].grad(), expected[i]), 1e-14) << "parameter " << i;
}

TEST(SplitBackward, InputGradientFirstThenWeightsEqualOneBackward) {
  Mlp mlp;
  Tensor x = leaf64({6, 4}, 5);
  Tensor dy = leaf64({6, 3}, 6).detach();
  expect_split_equals_one_backward(mlp.parameters(), [&] { return (mlp(x) * dy).sum(); }, x);
}

TEST(SplitBackward, ConvolutionsSplitTheirInputAndWeightGradients) {
  Tensor w1 = leaf64({3, 2, 3, 3}, 7), b1 = leaf64({3}, 8), w2 = leaf64({2, 3, 3, 3}, 9);
  Tensor x = leaf64({2, 2, 6, 6}, 10);
  auto loss = [&] {
    Tensor h = nn::functional::conv2d_relu(x, w1, b1, {.pad_h = 1, .pad_w = 1});
    return nn::functional::conv2d(h, w2).square().sum();
  };
  expect_split_equals_one_backward({w1, b1, w2}, loss, x);
}

TEST(SplitBackward, TheLstmLayerRunsItsRecurrenceFirstAndItsRecurrentWeightLater) {
  const int64_t steps = 5, batch = 2, input_size = 3, hidden = 4;
  Tensor w_ih = leaf64({4 * hidden, input_size}, 22), b = leaf64({4 * hidden}, 23), w_hh = leaf64({4 * hidden, hidden}, 24);
  Tensor x = leaf64({steps, batch, input_size}, 25);
  Tensor h0 = zeros({batch, hidden}, {.dtype = kFloat64}), c0 = zeros({batch, hidden}, {.dtype = kFloat64});
  auto loss = [&] {
    Tensor gates = nn::functional::linear(x, w_ih, b);
    return nn::functional::lstm_layer(gates, w_hh, h0, c0).output.square().sum();
  };
  expect_split_equals_one_backward({w_ih, b, w_hh}, loss, x);
}

// An op y = a * b recorded as selective, noting which inputs each call asks for.
Tensor noted_product(const Tensor& a, const Tensor& b, std::vector<std::vector<bool>>& asked) {
  Tensor y = a.detach() * b.detach();
  autograd::record_selective("NotedProduct", {a, b}, {y},
                             [a = a.detach(), b = b.detach(), &asked](const TensorList& g,
                                                                      const autograd::InputMask& wanted) {
                               asked.push_back({autograd::wants(wanted, 0), autograd::wants(wanted, 1)});
                               return TensorList{autograd::wants(wanted, 0) ? g[0] * b : Tensor(),
                                                 autograd::wants(wanted, 1) ? g[0] * a : Tensor()};
                             });
  return y;
}

TEST(SplitBackward, ASelectiveNodeIsAskedForTheInputsGradientThenTheWeights) {
  Tensor x = from_vector<double>({1, 2}).requires_grad_();
  Tensor w = from_vector<double>({3, 5}).requires_grad_();
  std::vector<std::vector<bool>> asked;
  Tensor loss = noted_product(x, w, asked).sum();
  autograd::WeightGradients rest = autograd::backward_inputs_first({loss}, {}, {x});
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::vector<bool>{true, false})) << "the first pass computed the weight's gradient";
  testing::expect_values(x.grad(), {3, 5});
  rest.compute();
  ASSERT_EQ(asked.size(), 2u);
  EXPECT_EQ(asked[1], (std::vector<bool>{false, true}));
  testing::expect_values(w.grad(), {1, 2});

  // An ordinary backward asks once for both.
  asked.clear();
  noted_product(x, w, asked).sum().backward();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], (std::vector<bool>{true, true}));
}

TEST(SplitBackward, NodesThatLeadOnlyToWeightsWaitForTheSecondPass) {
  // The weight passes through a transpose and a scale before the product:
  // neither is on x's path, so neither runs in the first pass.
  Tensor x = leaf64({2, 3}, 11), w = leaf64({4, 3}, 12);
  int weight_side_runs = 0;
  Tensor scaled = w.detach() * 2.0;
  autograd::record("CountedScale", {w}, scaled, [&weight_side_runs](const TensorList& g) {
    ++weight_side_runs;
    return TensorList{g[0] * 2.0};
  });
  Tensor loss = mm(x, scaled.t()).sum();
  autograd::WeightGradients rest = autograd::backward_inputs_first({loss}, {}, {x});
  EXPECT_EQ(weight_side_runs, 0);
  EXPECT_TRUE(x.grad().defined());
  rest.compute();
  EXPECT_EQ(weight_side_runs, 1);
  // d/dw of sum(x (2w)^T) = 2 * (column sums of x), for every row of w.
  Tensor expected = (x.detach().sum({0}) * 2.0).unsqueeze(0).expand({4, 3});
  EXPECT_LT(max_rel_error(w.grad(), expected), 1e-14);
}

TEST(SplitBackward, AWeightGradientComputedInTheFirstPassIsAccumulatedInTheSecond) {
  // x * gain is not selective: its backward computes both gradients at once,
  // but the gain's is held for the second pass, as DDP's hooks expect.
  Tensor x = leaf64({2, 3}, 18), gain = leaf64({3}, 19), w = leaf64({4, 3}, 20);
  expect_split_equals_one_backward({gain, w}, [&] { return mm(x * gain, w.t()).square().sum(); }, x);
}

// A layer norm is selective: its input's gradient in the first pass, its
// scale's and shift's (two column sums) in the second; together equal to
// one backward, as is a layer norm without them (no affine) or with a
// frozen scale.
TEST(SplitBackward, LayerNormGivesItsScaleAndShiftGradientsInTheSecondPass) {
  Tensor x = leaf64({6, 4}, 21), gain = leaf64({4}, 22), shift = leaf64({4}, 23), w = leaf64({3, 4}, 24);
  ASSERT_TRUE(nn::functional::layer_norm(x, {4}, gain, shift).grad_fn()->selective());
  expect_split_equals_one_backward(
      {gain, shift, w}, [&] { return mm(nn::functional::layer_norm(x, {4}, gain, shift), w.t()).square().sum(); }, x);

  // No affine; then a scale that takes no gradient and a shift that does.
  for (bool affine : {false, true}) {
    x.set_grad(Tensor());
    shift.set_grad(Tensor());
    Tensor frozen = gain.detach();
    auto plain = [&] {
      return affine ? nn::functional::layer_norm(x, {4}, frozen, shift).square().sum()
                    : nn::functional::layer_norm(x, {4}, Tensor(), Tensor()).square().sum();
    };
    plain().backward();
    const Tensor dx = x.grad().clone(), dshift = affine ? shift.grad().clone() : Tensor();
    x.set_grad(Tensor());
    shift.set_grad(Tensor());
    autograd::WeightGradients later = autograd::backward_inputs_first({plain()}, {}, {x});
    EXPECT_EQ(max_rel_error(x.grad(), dx), 0.0) << "affine " << affine;
    later.compute();
    if (affine) {
      EXPECT_LT(max_rel_error(shift.grad(), dshift), 1e-14);
    }
  }
}

TEST(SplitBackward, HooksAndCallbacksOfTheWeightsRunInTheSecondPass) {
  Mlp mlp;
  Tensor x = leaf64({3, 4}, 13);
  int accumulated = 0, callbacks = 0;
  mlp.w1.register_post_accumulate_grad_hook([&](const Tensor&) {
    ++accumulated;
    autograd::queue_callback([&] { ++callbacks; });
  });
  autograd::WeightGradients rest = autograd::backward_inputs_first({mlp(x).sum()}, {}, {x});
  EXPECT_EQ(accumulated, 0);
  rest.compute();
  EXPECT_EQ(accumulated, 1);
  EXPECT_EQ(callbacks, 1) << "a callback queued in the second pass runs at its end";
}

TEST(SplitBackward, AnInputTheRootsDoNotDependOnLeavesEverythingForTheSecondPass) {
  Mlp mlp;
  Tensor x = leaf64({3, 4}, 14), unused = leaf64({2}, 15);
  autograd::WeightGradients rest = autograd::backward_inputs_first({mlp(x).sum()}, {}, {unused});
  EXPECT_FALSE(unused.grad().defined());
  EXPECT_FALSE(x.grad().defined()) << "x is not a target: its gradient waits with the weights'";
  rest.compute();
  EXPECT_TRUE(x.grad().defined());
  for (const Tensor& p : mlp.parameters()) EXPECT_TRUE(p.grad().defined());
}

// A checkpointed segment replays its forward in the first pass, to get the
// input's gradient, and leaves its weights' gradients, hooks and callbacks
// to the second, as an unsplit segment would.
TEST(SplitBackward, ACheckpointedSegmentSplitsToo) {
  Mlp mlp;
  Tensor x = leaf64({3, 4}, 21);
  auto loss = [&] { return autograd::checkpoint([&](const Tensor& in) { return mlp(in); }, x).square().sum(); };
  Tensor expected_dx;
  const TensorList expected = reference_gradients(mlp.parameters(), loss, x, &expected_dx);
  int accumulated = 0, callbacks = 0;
  mlp.w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    ++accumulated;
    autograd::queue_callback([&] { ++callbacks; });
  });
  autograd::WeightGradients rest = autograd::backward_inputs_first({loss()}, {}, {x});
  EXPECT_EQ(max_rel_error(x.grad(), expected_dx), 0.0);
  for (const Tensor& p : mlp.parameters()) EXPECT_FALSE(p.grad().defined()) << "a weight's gradient came early";
  EXPECT_EQ(accumulated, 0);
  rest.compute();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_LT(max_rel_error(mlp.parameters()[i].grad(), expected[i]), 1e-14) << "parameter " << i;
  EXPECT_EQ(accumulated, 1);
  EXPECT_EQ(callbacks, 1);
}

TEST(SplitBackward, MisuseIsAClearError) {
  Mlp mlp;
  Tensor x = leaf64({3, 4}, 16);
  Tensor hidden = x * 2.0;
  EXPECT_THROW_MSG(autograd::backward_inputs_first({mlp(hidden).sum()}, {}, {hidden}),
                   "backward_inputs_first: input 0 must be a leaf that requires grad");
  autograd::WeightGradients rest = autograd::backward_inputs_first({mlp(x).sum()}, {}, {x});
  rest.compute();
  EXPECT_THROW_MSG(rest.compute(), "WeightGradients::compute: nothing to compute");
  EXPECT_THROW_MSG(autograd::WeightGradients().compute(), "nothing to compute");
}

TEST(SplitBackward, DroppingTheSecondPassLeavesTheWeightsWithoutGradients) {
  Mlp mlp;
  Tensor x = leaf64({3, 4}, 17);
  { autograd::WeightGradients rest = autograd::backward_inputs_first({mlp(x).sum()}, {}, {x}); }
  EXPECT_TRUE(x.grad().defined());
  for (const Tensor& p : mlp.parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace loom
