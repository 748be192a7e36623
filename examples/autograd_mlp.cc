// autograd_mlp: a two-layer perceptron learns two interleaved spirals, written
// with nothing but tensors and autograd (no nn, no optim), so every step of
// training is on the page.
//
//   bazel run //examples:autograd_mlp -- --steps 500 --hidden 64
#include <chrono>
#include <cmath>
#include <cstdio>

#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "examples/common/result.h"
#include "tensor/ops.h"
#include "tensor/stopwatch.h"

using namespace loom;

// Two spirals of `n` points each: x (2n, 2) float32, labels y (2n) int64.
std::pair<Tensor, Tensor> make_spirals(int64_t n, Generator& gen) {
  Tensor t = rand({n}, {}, &gen) * 3.0 + 0.25;  // radius and angle grow together
  Tensor noise = randn({2, 2 * n}, {}, &gen) * 0.08;
  Tensor angle = cat({t * 3.0, t * 3.0 + M_PI});
  Tensor radius = cat({t, t});
  Tensor x = stack({radius * cos(angle), radius * sin(angle)}, 1) + noise.t();
  Tensor y = cat({zeros({n}, {.dtype = kInt64}), ones({n}, {.dtype = kInt64})});
  return {x, y};
}

// Mean negative log-likelihood of the true class: the cross-entropy, by hand.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  Tensor log_probs = log_softmax(logits, 1);
  return -mean(gather(log_probs, 1, labels.unsqueeze(1)));
}

int train(int argc, char** argv) {
  using examples::integer_in, examples::number_in, examples::Scope;
  examples::Flags flags("Train a 2-layer MLP on two spirals with raw tensors and autograd");
  int steps = 600, hidden = 64, points = 500;
  double lr = 0.5;
  uint64_t seed = 0;
  flags.add("--steps", steps, "full-batch gradient steps", Scope::Run, integer_in(1, 10000000));
  flags.add("--hidden", hidden, "hidden units", Scope::Run, integer_in(1, 65536));
  flags.add("--points", points, "points per spiral", Scope::Run, integer_in(1, 10000000));
  flags.add("--lr", lr, "SGD learning rate", Scope::Run, number_in(0, 1e6));
  flags.add("--seed", seed, "random seed", Scope::Run);
  flags.parse(argc, argv);

  Generator gen(seed);
  auto [x, y] = make_spirals(points, gen);
  // Kaiming-uniform initialisation, as PyTorch's Linear.
  auto init = [&](Shape shape, int64_t fan_in) {
    double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    return uniform(shape, -bound, bound, {}, &gen).requires_grad_();
  };
  Tensor w1 = init({2, hidden}, 2), b1 = init({hidden}, 2);
  Tensor w2 = init({hidden, hidden}, hidden), b2 = init({hidden}, hidden);
  Tensor w3 = init({hidden, 2}, hidden), b3 = init({2}, hidden);
  TensorList params = {w1, b1, w2, b2, w3, b3};

  auto start = std::chrono::steady_clock::now();
  double loss_value = 0;
  for (int step = 1; step <= steps; ++step) {
    Tensor h = tanh(matmul(x, w1) + b1);
    h = tanh(matmul(h, w2) + b2);
    Tensor loss = cross_entropy(matmul(h, w3) + b3, y);
    for (Tensor& p : params) p.set_grad(Tensor());
    loss.backward();
    {
      NoGradGuard no_grad;  // the update itself is not part of the model
      for (Tensor& p : params) p.sub_(p.grad(), lr);
    }
    loss_value = loss.item();
    if (step == 1 || step % 100 == 0) std::printf("step %4d  loss %.4f\n", step, loss_value);
  }
  const double seconds = seconds_since(start);

  NoGradGuard no_grad;
  Tensor logits = matmul(tanh(matmul(tanh(matmul(x, w1) + b1), w2) + b2), w3) + b3;
  double accuracy = mean((argmax(logits, 1) == y).to(kFloat32)).item();
  std::printf("train accuracy %.1f%%\n", 100 * accuracy);
  examples::print_result({{"example", "autograd_mlp"}, {"loss", loss_value}, {"accuracy", accuracy}, {"seconds", seconds}});
  return 0;
}

int main(int argc, char** argv) {
  return examples::run_program("autograd_mlp", [&] { return train(argc, argv); });
}
