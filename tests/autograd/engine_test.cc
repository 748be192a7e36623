// The backward engine: accumulation, errors, hooks, threads.
#include "autograd/engine.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;

TEST(Backward, GradientsAccumulateAcrossCallsUntilZeroed) {
  Tensor w = from_vector<float>({1, 2}).requires_grad_();
  (w * 3.0).sum().backward();
  (w * 3.0).sum().backward();
  expect_values(w.grad(), {6, 6});
  {
    NoGradGuard no_grad;
    w.grad().zero_();
  }
  (w * w).sum().backward();  // used twice in one op: 2w
  expect_values(w.grad(), {2, 4});
}

TEST(Backward, TensorUsedOnSeveralPathsSumsItsGradients) {
  Tensor x = from_vector<double>({0.5, -1.0}).requires_grad_();
  Tensor y = x * 2.0;
  Tensor loss = (y * y + exp(y) + y).sum();  // d/dx = 2 (2y + e^y + 1)
  loss.backward();
  std::vector<double> xs = {0.5, -1.0}, expected;
  for (double v : xs) expected.push_back(2 * (2 * 2 * v + std::exp(2 * v) + 1));
  expect_values(x.grad(), expected, 1e-12);
}

TEST(Backward, SecondBackwardThroughAFreedGraphIsAnError) {
  Tensor w = ones({2}).requires_grad_();
  Tensor loss = (w * w).sum();
  loss.backward();
  EXPECT_THROW_MSG(loss.backward(), "trying to backward through the graph a second time");
}

TEST(Backward, RetainGraphAllowsASecondBackward) {
  Tensor w = ones({2}).requires_grad_();
  Tensor loss = (w * w).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  expect_values(w.grad(), {4, 4});
}

TEST(Backward, NonScalarOutputNeedsAnExplicitGradient) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_THROW_MSG(y.backward(), "a gradient can be created implicitly only for a single-element output");
  y.backward(full({3}, 0.5));
  expect_values(x.grad(), {1, 1, 1});
  Tensor z = x * 2.0;
  EXPECT_THROW_MSG(z.backward(ones({2})), "the gradient for output 0 has shape [2]");
}

TEST(Backward, OutputThatDoesNotRequireGrad) {
  Tensor x = ones({2});
  EXPECT_THROW_MSG(x.sum().backward(), "does not require grad and has no grad_fn");
  Tensor w = ones({2}).requires_grad_();
  Tensor y;
  {
    NoGradGuard no_grad;
    y = (w * 2.0).sum();
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW_MSG(y.backward(), "computed under NoGradGuard");
}

TEST(Backward, OnlyFloatingPointLeavesCanRequireGrad) {
  EXPECT_THROW_MSG(arange(3).requires_grad_(), "only floating-point tensors can require gradients, got int64");
  Tensor w = ones({2}).requires_grad_();
  Tensor y = w * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_THROW_MSG(y.requires_grad_(false), "only leaf tensors can change requires_grad");
}

TEST(Backward, DetachStopsTheGradient) {
  Tensor w = from_vector<float>({3}).requires_grad_();
  Tensor loss = (w * w.detach()).sum();  // d/dw = w.detach() only
  loss.backward();
  expect_values(w.grad(), {3});
}

TEST(Backward, SavedTensorModifiedInPlaceIsAnError) {
  Tensor w = from_vector<float>({1, 2}).requires_grad_();
  Tensor c = from_vector<float>({3, 4});
  Tensor loss = (w * c).sum();  // saves c for w's gradient
  c.add_(1.0);
  EXPECT_THROW_MSG(loss.backward(), "was modified by an in-place operation after it was saved: saved at version 0, now at version 1");
}

TEST(Backward, GradFunctionLeavesDotGradAlone) {
  Tensor x = from_vector<double>({1, 2}).requires_grad_();
  Tensor y = (x * x).sum();
  TensorList g = autograd::grad({y}, {x});
  expect_values(g[0], {2, 4});
  EXPECT_FALSE(x.grad().defined());
  // Gradient with respect to an intermediate value.
  Tensor a = x * 3.0;
  Tensor b = (a * a).sum();
  expect_values(autograd::grad({b}, {a})[0], {6, 12});
}

// split's backward puts its parts' gradients together with one copy, or
// none when they arrive side by side in one buffer, each where it belongs.
TEST(Backward, SplitTakesGradientsSideBySideWithoutACopy) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}).requires_grad_();
  Tensor y = x * 2.0;
  TensorList parts = split(y, {1, 3}, 1);
  Tensor buffer = from_vector<double>({10, 20, 30, 40, 50, 60, 70, 80}, {2, 4});
  TensorList in_place = {buffer.narrow(1, 0, 1), buffer.narrow(1, 1, 3)};
  Tensor dy = autograd::grad(parts, {y}, in_place, /*retain_graph=*/true)[0];
  EXPECT_EQ(dy.storage(), buffer.storage());
  expect_values(dy, {10, 20, 30, 40, 50, 60, 70, 80});
  // Pieces of one buffer, but not where the parts lie (the second part's
  // gradient starts one column in): copied where they belong.
  TensorList shifted = {buffer.narrow(1, 0, 1), buffer.narrow(1, 0, 3)};
  dy = autograd::grad(parts, {y}, shifted, /*retain_graph=*/true)[0];
  EXPECT_NE(dy.storage(), buffer.storage());
  expect_values(dy, {10, 10, 20, 30, 50, 50, 60, 70});
  // Pieces of separate tensors: copied too.
  dy = autograd::grad(parts, {y}, {in_place[0].clone(), in_place[1].clone()})[0];
  expect_values(dy, {10, 20, 30, 40, 50, 60, 70, 80});
}

// AddBackward sends one gradient tensor to both of its inputs, and a leaf's
// own backward gets the caller's tensor: a leaf's .grad() must be its own,
// or the next accumulation into one leaf would change the other (or the
// caller's tensor) too.
TEST(Backward, LeavesNeverShareTheirGradientMemory) {
  Tensor a = from_vector<double>({1, 2}).requires_grad_(), b = from_vector<double>({3, 4}).requires_grad_();
  (a + b).backward(from_vector<double>({1, 1}));
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  (a + b).backward(from_vector<double>({1, 1}));
  expect_values(a.grad(), {2, 2});
  expect_values(b.grad(), {2, 2});

  Tensor x = from_vector<double>({1, 2}).requires_grad_(), dy = from_vector<double>({5, 5});
  x.clone().backward(dy);
  x.clone().backward(dy);
  expect_values(x.grad(), {10, 10});
  expect_values(dy, {5, 5});
  x.backward(dy);  // x is its own root: its AccumulateGrad gets dy itself
  expect_values(x.grad(), {15, 15});
  expect_values(dy, {5, 5});
}

// A graph recorded before its leaf moved to another dtype (Module::to): the
// gradient no longer fits the leaf's .grad(), and adding it would have the
// kernel read float64 memory as float32.
TEST(Backward, AGradientThatNoLongerFitsItsLeafIsAnError) {
  Tensor w = from_vector<double>({1, 2}).requires_grad_();
  Tensor loss = (w * 3.0).sum();
  {
    NoGradGuard no_grad;
    w.set_data(w.to(kFloat32));
  }
  EXPECT_THROW_MSG(loss.backward(), "was it moved or converted between the forward and this backward?");
}

// The hook of a parameter used late in forward (so early in backward) fires
// while earlier layers' gradients are still being computed: DDP relies on it.
TEST(Hooks, LeafHookFiresAsSoonAsItsGradientIsFinal) {
  Generator gen(1);
  Tensor x = randn({4, 3}, {}, &gen);
  Tensor w1 = randn({3, 5}, {}, &gen).requires_grad_();
  Tensor w2 = randn({5, 2}, {}, &gen).requires_grad_();
  std::vector<std::string> order;
  bool w1_grad_missing_when_w2_final = false;
  w2.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order.push_back("w2");
    w1_grad_missing_when_w2_final = !w1.grad().defined();
    EXPECT_TRUE(p.grad().defined());
  });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("w1"); });
  Tensor loss = matmul(relu(matmul(x, w1)), w2).sum();
  loss.backward();
  EXPECT_EQ(order, (std::vector<std::string>{"w2", "w1"}));
  EXPECT_TRUE(w1_grad_missing_when_w2_final);
}

TEST(Hooks, FiresOnceAfterAllUsesOfTheLeaf) {
  Tensor w = from_vector<float>({1}).requires_grad_();
  int calls = 0;
  double grad_seen = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++calls;
    grad_seen = p.grad().item();
  });
  Tensor h = w * 2.0;
  Tensor loss = (h * 3.0 + w * 5.0).sum();  // w used early and late: 6 + 5
  loss.backward();
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(grad_seen, 11);
  EXPECT_THROW_MSG(h.register_post_accumulate_grad_hook([](const Tensor&) {}),
                   "only leaf tensors that require grad accumulate gradients");
}

TEST(Callbacks, RunAfterEveryNodeOfTheBackward) {
  Tensor w1 = ones({2}).requires_grad_(), w2 = ones({2}).requires_grad_();
  std::vector<std::string> log;
  w2.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("w2 ready");
    autograd::queue_callback([&] {
      log.push_back(std::string("callback, w1 ") + (w1.grad().defined() ? "done" : "missing"));
    });
  });
  w1.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("w1 ready"); });
  (tanh(w1 * 2.0) * w2).sum().backward();
  EXPECT_EQ(log, (std::vector<std::string>{"w2 ready", "w1 ready", "callback, w1 done"}));
  EXPECT_THROW_MSG(autograd::queue_callback([] {}), "queue_callback: no backward is running on this thread");
}

TEST(Tape, ThreadsRecordAndReplayTheirOwnGraphsConcurrently) {
  constexpr int kThreads = 4;
  std::vector<Tensor> leaves;
  for (int t = 0; t < kThreads; ++t) leaves.push_back(full({64}, t + 1.0).requires_grad_());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int step = 0; step < 20; ++step) {
        Tensor y = (tanh(leaves[t] * 0.1) * leaves[t]).sum();
        y.backward();
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    double v = t + 1.0, th = std::tanh(0.1 * v);
    double per_step = th + v * 0.1 * (1 - th * th);  // d/dv [tanh(0.1 v) v]
    expect_values(leaves[t].grad(), std::vector<double>(64, 20 * per_step), 1e-5);
  }
}

TEST(Tape, GradModeIsPerThread) {
  NoGradGuard no_grad;
  bool other_thread_enabled = false;
  std::thread([&] { other_thread_enabled = autograd::grad_enabled(); }).join();
  EXPECT_TRUE(other_thread_enabled);
  EXPECT_FALSE(autograd::grad_enabled());
}

TEST(Tape, DroppedGraphsFreeTheirMemory) {
  empty_cache(Device::cpu());
  Tensor w = randn({256, 256}).requires_grad_();
  const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
  for (int i = 0; i < 5; ++i) {
    Tensor y = tanh(matmul(w, w)).sum();  // never backpropagated
  }
  EXPECT_EQ(memory_stats(Device::cpu()).allocated_bytes, before);
}

}  // namespace
}  // namespace loom
