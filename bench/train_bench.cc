// train_bench: times training steps of the benchmark models and prints one
// JSON line. bench/torch_reference.py runs the same workloads in PyTorch with
// the same output, and bench/compare_torch.sh prints the ratio.
//
//   bazel run //bench:train_bench -- --model cnn --device cpu --steps 20
//
// Shapes (fixed, so that results compare across frameworks):
//   cnn   1x28x28 images, batch 256, the Fashion-MNIST CNN, AdamW lr 1e-3
//   gpt   vocab 65; cuda: 6 layers, 6 heads, d=384, context 256, batch 64;
//         cpu: 2 layers, 4 heads, d=128, context 64, batch 8; AdamW
//   lstm  2-layer LSTM, input 64, hidden 512 (cuda) or 128 (cpu), sequence 64,
//         batch 64, Linear(hidden, 10) on the last step; AdamW
// Inputs are random but fixed; each step is forward, backward, optimizer step.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>

#include "examples/models/models.h"
#include "optim/optimizer.h"

using namespace loom;

struct Workload {
  std::shared_ptr<nn::Module> model;
  std::function<Tensor()> loss;  // one forward pass to the loss
  int64_t samples_per_step;
  int64_t tokens_per_step;  // 0 where tokens mean nothing
};

Workload make_workload(const std::string& name, Device device) {
  const bool gpu = device.is_cuda();
  if (name == "cnn") {
    auto model = models::fashion_cnn();
    model->to(device);
    Tensor x = randn({256, 1, 28, 28}, {.device = device});
    Tensor y = randint(0, 10, {256}, {.dtype = kInt64, .device = device});
    return {model.ptr(), [=] { return nn::functional::cross_entropy(model->forward(x), y); }, 256, 0};
  }
  if (name == "gpt") {
    models::GPTConfig c = gpu ? models::GPTConfig{65, 256, 6, 6, 384} : models::GPTConfig{65, 64, 2, 4, 128};
    const int64_t batch = gpu ? 64 : 8;
    models::GPT model(c);
    model->to(device);
    Tensor idx = randint(0, c.vocab_size, {batch, c.block_size}, {.dtype = kInt64, .device = device});
    Tensor targets = randint(0, c.vocab_size, {batch * c.block_size}, {.dtype = kInt64, .device = device});
    return {model.ptr(),
            [=] {
              Tensor logits = model->forward(idx);
              return nn::functional::cross_entropy(logits.reshape({-1, c.vocab_size}), targets);
            },
            batch, batch * c.block_size};
  }
  if (name == "lstm") {
    const int64_t hidden = gpu ? 512 : 128;
    models::LSTMClassifier model({.input_size = 64, .hidden_size = hidden, .num_layers = 2, .classes = 10});
    model->to(device);
    Tensor x = randn({64, 64, 64}, {.device = device});
    Tensor y = randint(0, 10, {64}, {.dtype = kInt64, .device = device});
    return {model.ptr(), [=] { return nn::functional::cross_entropy(model->forward(x), y); }, 64, 0};
  }
  LOOM_FAIL("train_bench: unknown model '", name, "' (expected cnn, gpt or lstm)");
}

int main(int argc, char** argv) {
  CLI::App app{"Time training steps of loom's benchmark models"};
  std::string model = "cnn", device_name = "cpu";
  int steps = 20, warmup = 3, threads = 0;
  app.add_option("--model", model, "cnn, gpt or lstm")->capture_default_str();
  app.add_option("--device", device_name, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: OpenMP's default, one per core)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) omp_set_num_threads(threads);

  try {
    const Device device = Device::parse(device_name);
    manual_seed(0);
    Workload w = make_workload(model, device);
    optim::AdamW opt(w.model->parameters(), {.lr = 1e-3});
    auto train_step = [&] {
      Tensor loss = w.loss();
      opt.zero_grad();
      loss.backward();
      opt.step();
      return loss;
    };
    for (int i = 0; i < warmup; ++i) train_step();
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    Tensor loss;
    for (int i = 0; i < steps; ++i) loss = train_step();
    synchronize(device);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double final_loss = loss.item();  // after timing: reading it synchronises
    std::printf("{\"framework\": \"loom\", \"model\": \"%s\", \"device\": \"%s\", \"steps\": %d, "
                "\"threads\": %d, \"ms_per_step\": %.3f, \"samples_per_s\": %.1f, \"tokens_per_s\": %.1f, "
                "\"loss\": %.4f}\n",
                model.c_str(), device.str().c_str(), steps, omp_get_max_threads(), 1000 * seconds / steps,
                w.samples_per_step * steps / seconds, w.tokens_per_step * steps / seconds, final_loss);
  } catch (const Error& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
