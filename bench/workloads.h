// The benchmark workloads: fixed models and one fixed batch each, shared by
// train_bench, ddp_overhead_bench and compare_parallel so that their numbers
// describe the same computation (and bench/torch_reference.py's).
//
// Shapes:
//   cnn   1x28x28 images, batch 256, the Fashion-MNIST CNN (width 32)
//   gpt   vocab 65; cuda: 6 layers, 6 heads, d=384, context 256, batch 64;
//         cpu: 2 layers, 4 heads, d=128, context 64, batch 8 (measures per-op overhead)
//   gpt_large  vocab 65, 4 layers, 4 heads, d=256, context 128, batch 16 on
//         every device: a CPU shape bound by arithmetic rather than overhead
//   lstm  2-layer LSTM, input 64, hidden 512 (cuda) or 128 (cpu), sequence 64,
//         batch 64, Linear(hidden, 10) on the last step
//   mlp   Linear(512, h) + ReLU, then (layers - 2) x [Linear(h, h) + ReLU],
//         then Linear(h, 10); batch 256; h and layers are parameters
// Inputs and targets are random but fixed; both split along dim 0.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "nn/module.h"

namespace loom::bench {

struct Workload {
  std::string name;
  nn::ModulePtr model;
  Tensor input, target;  // one step's batch
  // The loss of a forward's output against (a slice of) the target.
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss;
  int64_t samples_per_step = 0;
  int64_t tokens_per_step = 0;  // 0 where tokens mean nothing
  // Floating-point operations of one training step in its matrix products
  // and convolutions (forward, and both gradients where they are needed;
  // a GPT's attention products as nanoGPT counts them); 0 where not counted.
  double flops_per_step = 0;
};

struct MlpShape {
  int64_t hidden = 1024;
  int layers = 4;
  int64_t batch = 256;
};

// The gpt workload's sequence length (its context) and sequences a step;
// 0 keeps the device's default shape (T 64 and 8 on a CPU, 256 and 64 on a GPU).
struct GptShape {
  int64_t context = 0;
  int64_t batch = 0;
};

// name: cnn, gpt, gpt_large, lstm or mlp. Weights come from the global generator.
Workload make_workload(const std::string& name, Device device, MlpShape mlp = {}, GptShape gpt = {});

}  // namespace loom::bench
