// allreduce_bench: all_reduce bandwidth of loom's process groups, with the
// nccl-tests definitions, one JSON line per (backend, ranks, size):
//   algbw = bytes / time            (time: slowest rank, mean over iterations)
//   busbw = algbw * 2 (n - 1) / n   (what each rank's link carries; comparable across n)
//
//   bazel run -c opt //bench:allreduce_bench -- --ranks 2,4 --max-bytes 64M     # threads
//   mpirun -np 2 --bind-to none bazel-bin/bench/allreduce_bench --max-bytes 64M  # MPI
//   mpirun -np 8 bazel-bin/bench/allreduce_bench --device cuda                   # NCCL, a GPU per rank
//
// Without mpirun it measures the threads backend with each --ranks count in
// this process; under mpirun, the MPI backend with one rank per process. With
// --device cuda the tensors live on the GPUs (rank r on cuda:<local rank>, or
// cuda:r as threads) and parallel::for_device picks the group: NCCL when each
// rank has a GPU of its own, host staging when they share. Timings then wait
// for the GPU (a synchronize after the last operation).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/init.h"
#include "parallel/comm/thread_group.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/memory_budget.h"
#include "tensor/ops.h"

using namespace loom;
using namespace loom::parallel;
using namespace loom::examples;

namespace {

constexpr int64_t kMinMessage = 8;                  // one element of the widest dtype
constexpr int64_t kMaxMessage = int64_t{16} << 30;  // 16G
constexpr int kMaxRanks = 64;                       // threads backend: ranks in this process

// A message size: a whole number of bytes, written as digits (a fraction
// allowed) and an optional K, M or G (powers of 1024): 4096, 4K, 1.5M, 2G.
// -1 where the text is anything else or out of range.
int64_t parse_bytes(const std::string& text) {
  size_t digits = 0, dots = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    dots += text[digits++] == '.';
  const std::string number = text.substr(0, digits), unit = text.substr(digits);
  if (number.empty() || dots > 1 || number.front() == '.' || number.back() == '.') return -1;
  const int64_t scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 0;
  if (scale == 0) return -1;
  const double bytes = std::strtod(number.c_str(), nullptr) * scale;
  if (!(bytes >= kMinMessage && bytes <= kMaxMessage) || bytes != std::floor(bytes)) return -1;
  return static_cast<int64_t>(bytes);
}

// A size as --max-bytes takes it: 16G, 512M, 4K, or bytes.
std::string spell_bytes(int64_t bytes) {
  for (auto [unit, shift] : {std::pair{"G", 30}, std::pair{"M", 20}, std::pair{"K", 10}})
    if (bytes % (int64_t{1} << shift) == 0) return std::to_string(bytes >> shift) + unit;
  return std::to_string(bytes);
}

CLI::Validator byte_size() {
  const std::string what = "a size from 8 to 16G in bytes, with K, M or G for 2^10, 2^20, 2^30";
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        return parse_bytes(text) < 0 ? "expected " + what + ", got '" + text + "'" : "";
      },
      what);
}

// Rank counts, comma-separated: 2,4,8.
std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    int n = 0;
    const char* end = item.data() + item.size();
    auto [stop, error] = std::from_chars(item.data(), end, n);
    if (item.empty() || error != std::errc() || stop != end || n < 1 || n > kMaxRanks) return {};
    ranks.push_back(n);
  }
  if (!text.empty() && text.back() == ',') return {};
  return ranks;
}

CLI::Validator rank_counts() {
  const std::string what = "comma-separated rank counts from 1 to " + std::to_string(kMaxRanks);
  return CLI::Validator(
      [what](std::string& text) -> std::string {
        return parse_ranks(text).empty() ? "expected " + what + ", got '" + text + "'" : "";
      },
      what);
}

struct Config {
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 256 << 20;
  double budget_seconds = 0.5;  // per size, roughly: bounds the iteration count
  int max_iters = 200;
  DType dtype = kFloat32;
  bool check = true;
};

// Each rank holds one message of --max-bytes at the end: the ranks this
// process runs as threads, or the ranks of the job on this machine, must fit
// in its memory together, or the kernel kills the bench without a word.
void check_messages_fit(const Config& config, const std::string& min_bytes, int copies, bool threads) {
  check_fits_in_memory({.flag = "--max-bytes",
                        .value = config.max_bytes,
                        .bytes = [](int64_t bytes) { return bytes; },
                        .what = "for the largest message",
                        .copies = copies,
                        .copies_are = threads ? "rank threads" : "processes on this machine",
                        .smallest = config.min_bytes,
                        .otherwise = "a smaller --min-bytes than " + min_bytes + (threads ? ", or fewer --ranks" : ""),
                        .spell = spell_bytes,
                        // The sizes measured double from --min-bytes: suggest the largest of them that fits.
                        .round_down =
                            [&](int64_t bytes) {
                              int64_t size = config.min_bytes;
                              while (size * 2 <= bytes) size *= 2;
                              return size;
                            }},
                       available_memory());
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The slowest rank's value: the collective is only done when all are.
double slowest(ProcessGroup& pg, double seconds) {
  Tensor t = scalar_tensor(seconds, {.dtype = kFloat64});
  pg.all_reduce(t, parallel::ReduceOp::Max)->wait();
  return t.item();
}

// Every rank runs this; rank 0 prints. All ranks take the same decisions
// (iteration counts come from the slowest rank's warm-up time).
void run(ProcessGroup& pg, const Config& config, Device device) {
  const int n = pg.size();
  // The host's clock measures the GPU's work only once the GPU is done.
  auto all_done = [&] {
    if (device.is_cuda()) synchronize(device);
  };
  for (int64_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= 2) {
    // The last size's buffer goes back to the system rather than into the
    // allocator's cache: a rank holds one size at a time, as the memory check assumes.
    empty_cache(device);
    const int64_t numel = bytes / static_cast<int64_t>(element_size(config.dtype));
    Tensor t = full({numel}, pg.rank() + 1.0, {.dtype = config.dtype, .device = device});

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
    all_done();
    const double warm = slowest(pg, (now_seconds() - start) / kWarm);

    const int iters = std::clamp(static_cast<int>(config.budget_seconds / std::max(warm, 1e-6)), 3,
                                 config.max_iters);
    pg.barrier()->wait();
    start = now_seconds();
    WorkPtr last;
    for (int i = 0; i < iters; ++i) last = pg.all_reduce(t);  // queued back to back
    last->wait();
    all_done();
    const double seconds = slowest(pg, (now_seconds() - start) / iters);

    if (pg.rank() == 0) {
      const double algbw = bytes / seconds / 1e9;
      std::printf(
          "{\"backend\": \"%s\", \"device\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"dtype\": \"%s\", "
          "\"iters\": %d, \"check\": %s, \"time_us\": %.2f, \"algbw_GBps\": %.3f, \"busbw_GBps\": %.3f}\n",
          pg.backend().c_str(), device.str().c_str(), n, static_cast<long long>(bytes), dtype_name(config.dtype), iters,
          pg.options().check_consistency ? "true" : "false", seconds * 1e6, algbw,
          algbw * 2.0 * (n - 1) / n);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Under mpirun a rank that fails ends the whole job at once.
  return run_program(
      "allreduce_bench",
      [&] {
        Flags flags("all_reduce bandwidth of loom's process groups (nccl-tests' algbw and busbw)");
        Config config;
        std::string min_bytes = "4K", max_bytes = "256M", ranks = "2", dtype = "float32", device = "cpu";
        bool no_check = false;
        flags.add("--min-bytes", min_bytes, "smallest message", Scope::Job, byte_size());
        flags.add("--max-bytes", max_bytes, "largest message (use less on small machines)", Scope::Job,
                  byte_size());
        flags.add("--ranks", ranks, "threads backend: rank counts to measure", Scope::Run, rank_counts());
        flags.add("--dtype", dtype, "float32, float64 or int64", Scope::Job,
                  CLI::IsMember({"float32", "float64", "int64"}));
        flags.add("--budget", config.budget_seconds, "seconds per size, roughly", Scope::Job, number_in(0, 1000));
        flags.add("--max-iters", config.max_iters, "iterations per size at most", Scope::Job,
                  integer_in(3, 1000000));
        flags.add("--device", device, "cpu, or cuda: the GPUs (under mpirun each rank its local one)", Scope::Job,
                  CLI::IsMember({"cpu", "cuda"}));
        flags.add_switch("--no-check", no_check, "skip the descriptor exchange where the backend can (MPI)",
                         Scope::Job);
        flags.parse(argc, argv);
        config.min_bytes = parse_bytes(min_bytes);
        config.max_bytes = parse_bytes(max_bytes);
        if (config.min_bytes > config.max_bytes)
          throw UsageError("--min-bytes " + min_bytes + " is more than --max-bytes " + max_bytes + " (see --help)");
        config.dtype = dtype == "float64" ? kFloat64 : dtype == "int64" ? kInt64 : kFloat32;

        if (device == "cpu") {
          const std::vector<int> counts = parse_ranks(ranks);
          const bool threads = !launched_by_mpi();
          check_messages_fit(config, min_bytes,
                             threads ? *std::max_element(counts.begin(), counts.end()) : processes_on_this_machine(),
                             threads);
        }

        ProcessGroupOptions options;
        options.check_consistency = !no_check;
        if (launched_by_mpi()) {
          auto world = init(argc, argv, options);
          const Device on = device_for_rank(device).device;
          run(*for_device(world, on), config, on);
          return 0;
        }
        for (int n : parse_ranks(ranks)) {
          auto groups = ThreadGroup::create(n, options);
          std::mutex mutex;
          std::exception_ptr first_error;
          std::vector<std::thread> threads;
          for (int r = 0; r < n; ++r)
            threads.emplace_back([&, r] {
              try {
                // As threads, rank r on cuda:r (GPUs shared round-robin when ranks outnumber them).
                const Device on = choose_device(device, r, device == "cuda" ? cuda_device_count() : 0).device;
                run(*for_device(groups[r], on), config, on);
              } catch (...) {
                {
                  std::lock_guard<std::mutex> lock(mutex);
                  if (!first_error) first_error = std::current_exception();
                }
                groups[r].reset();  // its peers' collectives fail instead of waiting for it
              }
            });
          for (auto& t : threads) t.join();
          if (first_error) std::rethrow_exception(first_error);
        }
        return 0;
      },
      abandon_job);
}
