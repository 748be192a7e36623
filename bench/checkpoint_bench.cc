// checkpoint_bench: what saving a training checkpoint costs the training
// loop. The same model trains on the same batch with no save, with a
// synchronous save (save_training_checkpoint) and with an asynchronous one
// (optim::AsyncCheckpoint) every --save-every steps, in one process. Each
// round runs the three, starting with a different one, so drifts in machine
// load hit all alike; the medians of the rounds' ms/step are compared.
// Prints one JSON line per mode.
//
//   bazel run -c opt //bench:checkpoint_bench -- --model mlp --save-every 5 --rounds 7
//
// "ms_per_step": the steps and the save calls they make, over the round.
// "save_call_ms": the training thread's time in one save call (sync: the
// whole write, fsync included; async: the snapshot's copy, plus waiting for
// the previous write if it still ran). "drain_ms": async only, per round,
// the wait for the last write once the steps are done (outside ms_per_step).
// The file goes to --checkpoint (default: in $TMPDIR, else /tmp) and every
// save is fsync'd, so the disk under it is part of the number.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "bench/median.h"
#include "bench/workloads.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "optim/async_checkpoint.h"
#include "optim/optimizer.h"
#include "optim/training_checkpoint.h"
#include "tensor/backend.h"
#include "tensor/file_io.h"
#include "tensor/stopwatch.h"

using namespace loom;
using namespace loom::examples;

namespace {

enum class Mode { None, Sync, Async };
const char* name_of(Mode m) { return m == Mode::None ? "none" : m == Mode::Sync ? "sync" : "async"; }

struct Round {
  double ms_per_step = 0, save_call_ms = 0, drain_ms = 0;
};

const optim::CheckpointWriter kWriter{.program = "checkpoint_bench", .layout = "one device"};

Round run_round(Mode mode, const bench::Workload& w, optim::Optimizer& opt, int steps, int save_every,
                const std::string& path, Device device) {
  optim::AsyncCheckpoint saver;
  double in_saves = 0;
  int saves = 0;
  synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= steps; ++i) {
    Tensor loss = w.loss(w.model->forward(w.input), w.target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    if (mode == Mode::None || i % save_every != 0) continue;
    const auto save_start = std::chrono::steady_clock::now();
    const optim::TrainingProgress progress{.step = i};
    if (mode == Mode::Sync)
      optim::save_training_checkpoint(path, *w.model, opt, progress, kWriter);
    else
      saver.save(path, *w.model, opt, progress, kWriter);
    in_saves += seconds_since(save_start);
    ++saves;
  }
  synchronize(device);
  Round r;
  r.ms_per_step = 1000 * seconds_since(start) / steps;
  r.save_call_ms = saves ? 1000 * in_saves / saves : 0;
  const auto drain_start = std::chrono::steady_clock::now();
  saver.wait();
  r.drain_ms = 1000 * seconds_since(drain_start);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("checkpoint_bench", [&] {
    Flags flags("Training steps with no checkpoint, a synchronous save and an asynchronous one");
    std::string model = "mlp", device_name = "cpu";
    const char* tmp = std::getenv("TMPDIR");
    std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/checkpoint_bench.safetensors";
    int rounds = 5, steps = 20, save_every = 5, threads = 0;
    flags.add("--model", model, "cnn, gpt, gpt_large, lstm or mlp (bench/workloads.h)", Scope::Run,
              CLI::IsMember({"cnn", "gpt", "gpt_large", "lstm", "mlp"}));
    flags.add("--device", device_name, "cpu or cuda[:N]", Scope::Run, examples::device_name());
    flags.add("--rounds", rounds, "rounds; each runs the three modes", Scope::Run, integer_in(1, 100000));
    flags.add("--steps", steps, "training steps per mode and round", Scope::Run, integer_in(1, 1000000));
    flags.add("--save-every", save_every, "steps between saves", Scope::Run, integer_in(1, 1000000));
    flags.add("--checkpoint", path, "where the saves go (rewritten, then removed)", Scope::Rank);
    flags.add("--threads", threads, "CPU threads (0: OpenMP's default)", Scope::Run, integer_in(0, 1024));
    flags.parse(argc, argv);
    const Device device = Device::parse(device_name);
    if (threads > 0) omp_set_num_threads(threads);
    AtomicFile::check_writable(path, "--checkpoint");

    manual_seed(0);
    bench::Workload w = bench::make_workload(model, device);
    optim::AdamW opt(w.model->parameters(), {.lr = 1e-3});
    run_round(Mode::Sync, w, opt, save_every, save_every, path, device);  // warm up: caches, Adam's state, the file
    const double mb = static_cast<double>(std::filesystem::file_size(path)) / (1 << 20);

    const std::vector<Mode> modes{Mode::None, Mode::Sync, Mode::Async};
    std::vector<std::vector<Round>> results(modes.size());
    for (int r = 0; r < rounds; ++r)
      for (size_t i = 0; i < modes.size(); ++i) {
        const size_t m = (i + r) % modes.size();
        results[m].push_back(run_round(modes[m], w, opt, steps, save_every, path, device));
      }
    std::filesystem::remove(path);
    auto med = [&](size_t m, double Round::*field) {
      std::vector<double> v;
      for (const Round& r : results[m]) v.push_back(r.*field);
      return bench::median(v);
    };
    const double none = med(0, &Round::ms_per_step);
    for (size_t m = 0; m < modes.size(); ++m) {
      const double ms = med(m, &Round::ms_per_step);
      std::printf("{\"bench\": \"checkpoint\", \"model\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"mode\": \"%s\", "
                  "\"checkpoint_mb\": %.2f, \"rounds\": %d, \"steps_per_round\": %d, \"save_every\": %d, "
                  "\"ms_per_step\": %.3f, \"overhead_pct\": %.2f, \"save_call_ms\": %.3f, \"drain_ms\": %.3f}\n",
                  model.c_str(), device.str().c_str(), omp_get_max_threads(), name_of(modes[m]), mb, rounds, steps,
                  save_every, ms, 100 * (ms - none) / none, med(m, &Round::save_call_ms), med(m, &Round::drain_ms));
    }
    return 0;
  });
}
