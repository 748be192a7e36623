// train_bench: times training steps of the benchmark models and prints one
// JSON line. bench/torch_reference.py runs the same workloads in PyTorch with
// the same output, and bench/compare_torch.sh prints the ratio.
//
//   bazel run //bench:train_bench -- --model cnn --device cpu --steps 20
//
// Shapes: bench/workloads.h (the same as torch_reference.py's).
// Inputs are random but fixed; each step is forward, backward, optimizer step.
#include <omp.h>

#include <chrono>
#include <cstdio>

#include "bench/workloads.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "optim/optimizer.h"
#include "tensor/backend.h"
#include "tensor/stopwatch.h"

using namespace loom;
using namespace loom::examples;

int main(int argc, char** argv) {
  return run_program("train_bench", [&] {
    Flags flags("Time training steps of loom's benchmark models");
    std::string model = "cnn", device_name = "cpu";
    int steps = 20, warmup = 3, threads = 0;
    flags.add("--model", model, "cnn, gpt, lstm or mlp", Scope::Run, CLI::IsMember({"cnn", "gpt", "lstm", "mlp"}));
    flags.add("--device", device_name, "cpu or cuda[:N]", Scope::Run, examples::device_name());
    flags.add("--steps", steps, "timed steps", Scope::Run, integer_in(1, 1000000));
    flags.add("--warmup", warmup, "untimed steps first", Scope::Run, integer_in(0, 1000000));
    flags.add("--threads", threads, "CPU threads (0: OpenMP's default, one per core)", Scope::Run,
              integer_in(0, 1024));
    flags.parse(argc, argv);
    const Device device = Device::parse(device_name);
    if (threads > 0) omp_set_num_threads(threads);

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
    const double seconds = seconds_since(start);
    const double final_loss = loss.item();  // after timing: reading it synchronises
    std::printf("{\"framework\": \"loom\", \"model\": \"%s\", \"device\": \"%s\", \"steps\": %d, "
                "\"threads\": %d, \"ms_per_step\": %.3f, \"samples_per_s\": %.1f, \"tokens_per_s\": %.1f, "
                "\"loss\": %.4f}\n",
                model.c_str(), device.str().c_str(), steps, omp_get_max_threads(), 1000 * seconds / steps,
                w.samples_per_step * steps / seconds, w.tokens_per_step * steps / seconds, final_loss);
    return 0;
  });
}
