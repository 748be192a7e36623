// Activation checkpointing: the same gradients as without it (float64,
// Dropout included, so the replay must draw the same numbers), errors for
// inputs changed in place, and the memory it saves against a prediction.
#include "autograd/checkpoint.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <thread>

#include "autograd/engine.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tensor/allocator.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using loom::testing::max_rel_error;

// L x [Linear(h, h), Tanh, Dropout(p)]: Dropout makes the replay's random numbers matter.
nn::Sequential mlp(int layers, int64_t h, double p, DType dtype) {
  nn::Sequential net;
  for (int i = 0; i < layers; ++i) {
    net->push_back(nn::Linear(h, h));
    net->push_back(nn::Tanh());
    if (p > 0) net->push_back(nn::Dropout(p));
  }
  net->to(dtype);
  return net;
}

// Three SGD steps of `plain` (forward as is) and `checkpointed` (forward in
// `segments` checkpointed runs), from the same weights and random stream.
void expect_same_training(int segments) {
  manual_seed(3);
  nn::Sequential plain = mlp(4, 8, 0.3, kFloat64);
  nn::Sequential checkpointed(plain->clone());
  optim::SGD opt_plain(plain->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt_checkpointed(checkpointed->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    Generator data(100 + step);
    Tensor x = randn({5, 8}, {.dtype = kFloat64}, &data).requires_grad_();
    Tensor x2 = x.detach().requires_grad_();
    manual_seed(50 + step);  // the same dropout masks on both sides
    opt_plain.zero_grad();
    plain->forward(x).square().sum().backward();
    manual_seed(50 + step);
    opt_checkpointed.zero_grad();
    nn::checkpoint_sequential(checkpointed, segments, x2).square().sum().backward();
    EXPECT_LT(max_rel_error(x2.grad(), x.grad()), 1e-12) << "input gradient, step " << step;
    for (size_t i = 0; i < plain->parameters().size(); ++i)
      EXPECT_LT(max_rel_error(checkpointed->parameters()[i].grad(), plain->parameters()[i].grad()), 1e-12)
          << "parameter " << i << ", step " << step;
    opt_plain.step();
    opt_checkpointed.step();
  }
  EXPECT_EQ(default_generator().state().offset, default_generator().state().offset);
}

TEST(Checkpoint, SequentialInOneToFourSegmentsTrainsAsWithout) {
  for (int segments : {1, 2, 3, 4}) {
    SCOPED_TRACE(::testing::Message() << segments << " segments");
    expect_same_training(segments);
  }
}

// The replay leaves the random stream where the forward left it: what comes
// after the backward draws the same numbers as without checkpointing.
TEST(Checkpoint, LeavesTheRandomStreamAsWithout) {
  nn::Sequential net = mlp(2, 4, 0.5, kFloat64);
  manual_seed(9);
  nn::checkpoint_sequential(net, 2, randn({3, 4}, {.dtype = kFloat64})).sum().backward();
  const Tensor after_checkpointed = rand({4});
  manual_seed(9);
  net->forward(randn({3, 4}, {.dtype = kFloat64})).sum().backward();
  EXPECT_TRUE(rand({4}).to_vector<float>() == after_checkpointed.to_vector<float>());
}

// DataParallel replicas run checkpointed segments in threads of their own,
// all drawing from the one default generator: each replay must draw what its
// own forward drew, whatever the other threads draw meanwhile.
TEST(Checkpoint, ThreadsReplayTheirOwnRandomNumbers) {
  constexpr int kThreads = 4, kSteps = 200;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int step = 0; step < kSteps; ++step) {
        Tensor x = ones({512}, {.dtype = kFloat64}).requires_grad_();
        Tensor y = autograd::checkpoint([](const Tensor& in) { return nn::functional::dropout(in, 0.5, true); }, x);
        y.sum().backward();
        // dy/dx is the forward's mask scaled by 2: y itself, as x is ones.
        if (!allclose(x.grad(), y.detach(), 0, 0)) ++mismatches[t];
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(kThreads, 0)) << "replays whose mask differed from their forward's";
}

// A checkpoint inside a checkpoint (checkpoint_sequential under
// checkpoint): the inner segments are recorded during the outer replay and
// must record the replayed numbers, so Dropout still drops as without.
TEST(Checkpoint, NestedSegmentsDrawTheForwardsNumbers) {
  manual_seed(5);
  nn::Sequential net = mlp(4, 6, 0.5, kFloat64);
  Generator data(6);
  Tensor x = randn({3, 6}, {.dtype = kFloat64}, &data).requires_grad_(), x2 = x.detach().requires_grad_();
  manual_seed(7);
  net->forward(x).square().sum().backward();
  const TensorList plain = {x.grad(), net->parameters()[0].grad()};
  x.set_grad(Tensor());
  net->zero_grad();
  manual_seed(7);
  autograd::checkpoint([&](const Tensor& in) { return nn::checkpoint_sequential(net, 2, in); }, x2)
      .square().sum().backward();
  EXPECT_LT(max_rel_error(x2.grad(), plain[0]), 1e-12);
  EXPECT_LT(max_rel_error(net->parameters()[0].grad(), plain[1]), 1e-12);
}

TEST(Checkpoint, AReplayThatDrawsMoreThanItsForwardIsAnError) {
  Tensor x = ones({4}).requires_grad_();
  // Draws only under grad mode, which the forward runs without.
  Tensor y = autograd::checkpoint(
      [](const Tensor& in) { return autograd::grad_enabled() ? nn::functional::dropout(in, 0.5, true) : in * 1.0; }, x);
  EXPECT_THROW_MSG(y.sum().backward(), "draws more random numbers than its forward did (0 draws)");
}

// Several inputs and outputs; an output that gets no gradient; an input that
// needs none. Gradients match plain autograd.
TEST(Checkpoint, ManyInputsAndOutputs) {
  manual_seed(1);
  Tensor a = randn({3, 2}, {.dtype = kFloat64}).requires_grad_(), b = randn({3, 2}, {.dtype = kFloat64});
  Tensor w = randn({2, 2}, {.dtype = kFloat64}).requires_grad_();
  auto fn = [&](const TensorList& in) { return TensorList{in[0].matmul(w).tanh() * in[1], in[0].exp()}; };
  TensorList out = autograd::checkpoint(fn, {a, b});
  out[0].sum().backward();  // out[1] unused
  const Tensor ga = a.grad(), gw = w.grad();
  a.set_grad(Tensor());
  w.set_grad(Tensor());
  fn({a, b})[0].sum().backward();
  EXPECT_LT(max_rel_error(ga, a.grad()), 1e-14);
  EXPECT_LT(max_rel_error(gw, w.grad()), 1e-14);
  EXPECT_FALSE(b.grad().defined());
}

// Only parameters need gradients (the input is data): they still get them.
TEST(Checkpoint, ParametersGetGradientsWhenTheInputNeedsNone) {
  manual_seed(2);
  nn::Linear layer(3, 2);
  layer->to(kFloat64);
  Tensor y = autograd::checkpoint([&](const Tensor& x) { return layer->forward(x); }, ones({4, 3}, {.dtype = kFloat64}));
  ASSERT_TRUE(y.requires_grad());
  y.sum().backward();
  loom::testing::expect_values(layer->bias.grad(), {4, 4});
}

TEST(Checkpoint, AnInputChangedInPlaceIsAnError) {
  Tensor x = ones({2, 2}).requires_grad_();
  Tensor h = x * 2;
  Tensor y = autograd::checkpoint([](const Tensor& in) { return in.square(); }, h);
  {
    NoGradGuard no_grad;
    h.add_(1);
  }
  EXPECT_THROW_MSG(y.sum().backward(), "modified");
}

// Without grad mode it is the plain function: nothing recorded.
TEST(Checkpoint, WithoutGradModeItIsThePlainFunction) {
  NoGradGuard no_grad;
  Tensor y = autograd::checkpoint([](const Tensor& in) { return in * 2; }, ones({2}).requires_grad_());
  EXPECT_FALSE(y.requires_grad());
}

// Memory. L layers of Linear + Tanh on a batch of B x H (float32): each layer
// keeps one B x H activation for backward (the Tanh output, which the next
// Linear also saves; the Linear's output is freed once Tanh has used it), so
// plain training peaks at about L activations. In S checkpointed segments,
// forward keeps the S - 1 segment inputs and the last segment's L/S
// activations, and backward recomputes one segment at a time: the peak is
// about S - 1 + L/S activations. The drop predicted: (L - (S - 1) - L/S)
// activations, for L = 16 and S = 4: 9 of them.
TEST(Checkpoint, PeakMemoryDropsAsPredicted) {
  constexpr int L = 16, S = 4;
  constexpr int64_t B = 256, H = 256;
  manual_seed(4);
  nn::Sequential net = mlp(L, H, 0, kFloat32);
  Tensor x = randn({B, H});
  auto peak_of = [&](bool checkpointed) {
    net->zero_grad();
    net->forward(x).sum().backward();  // the gradients' memory exists before measuring
    const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
    reset_peak_memory_stats(Device::cpu());
    (checkpointed ? nn::checkpoint_sequential(net, S, x) : net->forward(x)).sum().backward();
    return memory_stats(Device::cpu()).peak_allocated_bytes - before;
  };
  const double activation = B * H * 4;
  const double plain = peak_of(false), checkpointed = peak_of(true);
  const double predicted_drop = (L - (S - 1) - L / S) * activation;
  std::printf("peak above the step's start: plain %.2f activations, checkpointed %.2f; drop %.2f, predicted %d\n",
              plain / activation, checkpointed / activation, (plain - checkpointed) / activation, L - (S - 1) - L / S);
  EXPECT_NEAR(plain - checkpointed, predicted_drop, 1.5 * activation)
      << "plain peak " << plain / activation << " activations, checkpointed " << checkpointed / activation;
}

}  // namespace
}  // namespace loom
