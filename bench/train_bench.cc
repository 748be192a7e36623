// train_bench: times training steps of the benchmark models and prints one
// JSON line. bench/torch_reference.py runs the same workloads in PyTorch with
// the same output, and bench/compare_torch.sh prints the ratio.
//
//   bazel run //bench:train_bench -- --model cnn --device cpu --steps 20
//
// Shapes: bench/workloads.h (the same as torch_reference.py's).
// Inputs are random but fixed; each step is forward, backward, optimizer step.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "bench/workloads.h"
#include "optim/optimizer.h"
#include "tensor/backend.h"

using namespace loom;

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
    bench::Workload w = bench::make_workload(model, device);
    optim::AdamW opt(w.model->parameters(), {.lr = 1e-3});
    auto train_step = [&] {
      Tensor loss = w.loss(w.model->forward(w.input), w.target);
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
