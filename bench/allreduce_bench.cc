// allreduce_bench: all_reduce bandwidth of loom's process groups, with the
// nccl-tests definitions, one JSON line per (backend, ranks, size):
//   algbw = bytes / time            (time: slowest rank, mean over iterations)
//   busbw = algbw * 2 (n - 1) / n   (what each rank's link carries; comparable across n)
//
//   bazel run -c opt //bench:allreduce_bench -- --ranks 2,4 --max-bytes 64M     # threads
//   mpirun -np 2 --bind-to none bazel-bin/bench/allreduce_bench --max-bytes 64M  # MPI
//
// Without mpirun it measures the threads backend with each --ranks count in
// this process; under mpirun, the MPI backend with one rank per process.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/init.h"
#include "parallel/comm/thread_group.h"
#include "tensor/ops.h"

using namespace loom;
using namespace loom::parallel;

namespace {

struct Config {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 256 << 20;
  double budget_seconds = 0.5;  // per size, roughly: bounds the iteration count
  int max_iters = 200;
  DType dtype = kFloat32;
  bool check = true;
};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The slowest rank's value: the collective is only done when all are.
double slowest(ProcessGroup& pg, double seconds) {
  Tensor t = scalar_tensor(seconds, {.dtype = kFloat64});
  pg.all_reduce(t, ReduceOp::Max)->wait();
  return t.item();
}

// Every rank runs this; rank 0 prints. All ranks take the same decisions
// (iteration counts come from the slowest rank's warm-up time).
void run(ProcessGroup& pg, const Config& config) {
  const int n = pg.size();
  for (int64_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 2) {
    const int64_t numel = bytes / static_cast<int64_t>(element_size(config.dtype));
    Tensor t = full({numel}, pg.rank() + 1.0, {.dtype = config.dtype});

    // Warm-up, which also checks the result once (the sum of 1..n), then a
    // few timed rounds to choose the iteration count.
    pg.all_reduce(t)->wait();
    double got = t.narrow(0, numel - 1, 1).item();
    if (got != n * (n + 1) / 2.0)
      std::fprintf(stderr, "allreduce_bench: wrong result %g (expected %g) at %lld bytes\n", got,
                   n * (n + 1) / 2.0, static_cast<long long>(bytes));
    t.zero_();  // zeros stay zeros: no overflow, no denormals, however many iterations
    constexpr int kWarm = 3;
    double start = now_seconds();
    for (int i = 0; i < kWarm; ++i) pg.all_reduce(t)->wait();
    const double warm = slowest(pg, (now_seconds() - start) / kWarm);

    const int iters = std::clamp(static_cast<int>(config.budget_seconds / std::max(warm, 1e-6)), 3,
                                 config.max_iters);
    pg.barrier()->wait();
    start = now_seconds();
    WorkPtr last;
    for (int i = 0; i < iters; ++i) last = pg.all_reduce(t);  // queued back to back
    last->wait();
    const double seconds = slowest(pg, (now_seconds() - start) / iters);

    if (pg.rank() == 0) {
      const double algbw = bytes / seconds / 1e9;
      std::printf(
          "{\"backend\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"dtype\": \"%s\", \"iters\": %d, "
          "\"check\": %s, \"time_us\": %.2f, \"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f}\n",
          pg.backend().c_str(), n, static_cast<long long>(bytes), dtype_name(config.dtype), iters,
          pg.options().check_consistency ? "true" : "false", seconds * 1e6, algbw,
          algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"all_reduce bandwidth of loom's process groups (nccl-tests' algbw and busbw)"};
  Config config;
  std::vector<int> ranks = {2};
  std::string dtype = "float32";
  bool no_check = false;
  auto bytes = [](int64_t& target) {
    return [&target](const std::string& text) {
      size_t end = 0;
      double value = std::stod(text, &end);
      std::string unit = text.substr(end);
      int64_t scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 0;
      if (scale == 0) throw CLI::ValidationError("size", "use a number with K, M or G: " + text);
      target = static_cast<int64_t>(value * scale);
    };
  };
  app.add_option_function<std::string>("--min-bytes", bytes(config.min_bytes), "smallest message (4K)");
  app.add_option_function<std::string>("--max-bytes", bytes(config.max_bytes),
                                       "largest message (256M; use less on small machines)");
  app.add_option("--ranks", ranks, "threads backend: rank counts to measure")->delimiter(',')
      ->capture_default_str();
  app.add_option("--dtype", dtype, "float32, float64 or int64")->capture_default_str();
  app.add_option("--budget", config.budget_seconds, "seconds per size, roughly")->capture_default_str();
  app.add_option("--max-iters", config.max_iters, "iterations per size at most")->capture_default_str();
  app.add_flag("--no-check", no_check, "skip the descriptor exchange where the backend can (MPI)");
  CLI11_PARSE(app, argc, argv);
  config.dtype = dtype == "float64" ? kFloat64 : dtype == "int64" ? kInt64 : kFloat32;

  ProcessGroupOptions options;
  options.check_consistency = !no_check;
  if (launched_by_mpi()) {
    auto pg = init(argc, argv, options);
    run(*pg, config);
    return 0;
  }
  for (int n : ranks) {
    auto groups = ThreadGroup::create(n, options);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { run(*groups[r], config); });
    for (auto& t : threads) t.join();
  }
  return 0;
}
