// ddp_overhead_bench: what DistributedDataParallel costs when there is
// nothing to communicate with: one rank (threads backend) vs the bare model,
// same device, same workload, in one process. Rounds alternate between the
// two (and which goes first), so drifts in machine load hit both alike; the
// medians of the rounds' ms/step are compared. Prints one JSON line per model.
//
//   bazel run //bench:ddp_overhead_bench -- --models cnn,gpt --rounds 7
//
// What DDP adds at world size 1: a bucket copy of every gradient, one
// all_reduce per bucket through the communication thread, the copy back.
// The "view" variant (gradient_as_bucket_view, gradients zeroed in place)
// drops both copies: backward accumulates straight into the buckets.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "bench/median.h"
#include "bench/workloads.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "optim/optimizer.h"
#include "tensor/backend.h"
#include "parallel/comm/thread_group.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tensor/stopwatch.h"

using namespace loom;
using namespace loom::examples;

namespace {

struct Trainer {
  nn::ModulePtr module;  // what forward is called on
  std::unique_ptr<optim::AdamW> opt;
  bool set_to_none = true;  // how zero_grad clears the gradients

  void step(const bench::Workload& w) {
    Tensor loss = w.loss(module->forward(w.input), w.target);
    opt->zero_grad(set_to_none);
    loss.backward();
    opt->step();
  }
  // ms per step over `steps` steps.
  double time(const bench::Workload& w, int steps, Device device) {
    synchronize(device);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step(w);
    synchronize(device);
    return 1000 * seconds_since(start) / steps;
  }
};

}  // namespace

int main(int argc, char** argv) {
  return run_program("ddp_overhead_bench", [&] {
    Flags flags("DistributedDataParallel at world size 1 vs the bare model");
    std::string models = "cnn,gpt", device_name = "cpu";
    int rounds = 7, steps = 5, threads = 0;
    flags.add("--models", models, "comma-separated: cnn, gpt, lstm, mlp", Scope::Run,
              list_of({"cnn", "gpt", "lstm", "mlp"}));
    flags.add("--device", device_name, "cpu or cuda[:N]", Scope::Run, examples::device_name());
    flags.add("--rounds", rounds, "alternating timed rounds per variant", Scope::Run, integer_in(1, 100000));
    flags.add("--steps", steps, "training steps per round", Scope::Run, integer_in(1, 1000000));
    flags.add("--threads", threads, "CPU threads (0: OpenMP's default)", Scope::Run, integer_in(0, 1024));
    flags.parse(argc, argv);
    const Device device = Device::parse(device_name);
    if (threads > 0) omp_set_num_threads(threads);

    auto group = parallel::ThreadGroup::create(1)[0];
    std::stringstream list(models);
    for (std::string name; std::getline(list, name, ',');) {
      manual_seed(0);
      bench::Workload w = bench::make_workload(name, device);
      nn::ModulePtr copy = w.model->clone(), view_copy = w.model->clone();
      auto adamw = [](const nn::ModulePtr& m) {
        return std::make_unique<optim::AdamW>(m->parameters(), optim::AdamOptions{.lr = 1e-3});
      };
      parallel::DistributedDataParallel ddp(copy, group);
      parallel::DistributedDataParallel ddp_view(view_copy, group, {.gradient_as_bucket_view = true});
      std::vector<Trainer> variants;  // the bare model, DDP, DDP with gradients as bucket views
      variants.push_back({w.model, adamw(w.model)});
      variants.push_back({ddp, adamw(copy)});
      variants.push_back({ddp_view, adamw(view_copy), /*set_to_none=*/false});
      for (Trainer& t : variants) t.time(w, 2, device);  // warm up: allocator caches, buckets

      // Each round runs every variant, starting with a different one.
      std::vector<std::vector<double>> ms(variants.size());
      for (int r = 0; r < rounds; ++r)
        for (size_t i = 0; i < variants.size(); ++i) {
          const size_t v = (i + r) % variants.size();
          ms[v].push_back(variants[v].time(w, steps, device));
        }
      const double p = bench::median(ms[0]), d = bench::median(ms[1]), v = bench::median(ms[2]);
      const parallel::ReducerStats stats = ddp->reducer().stats();
      std::printf("{\"bench\": \"ddp_overhead\", \"model\": \"%s\", \"device\": \"%s\", \"threads\": %d, "
                  "\"rounds\": %d, \"steps_per_round\": %d, \"plain_ms_per_step\": %.3f, \"ddp_ms_per_step\": %.3f, "
                  "\"overhead_pct\": %.2f, \"ddp_view_ms_per_step\": %.3f, \"view_overhead_pct\": %.2f, "
                  "\"buckets\": %zu, \"allreduce_bytes_per_step\": %lld}\n",
                  name.c_str(), device.str().c_str(), omp_get_max_threads(), rounds, steps, p, d, 100 * (d - p) / p, v,
                  100 * (v - p) / p, ddp->reducer().buckets().size(),
                  static_cast<long long>(stats.bytes / std::max<int64_t>(1, stats.synced_backwards)));
      std::fflush(stdout);
    }
    return 0;
  });
}
