// What the strategy runners share (strategies.cc, data_parallel_runs.cc,
// model_parallel_runs.cc): timing steps, telling compute, communication and
// idle apart in a step's trace, and running a body on every rank. Internal
// to bench/compare.
#pragma once

#include <omp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/compare/strategies.h"
#include "bench/median.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/thread_group.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/sequence_split.h"
#include "parallel/tensor_parallel/layers.h"
#include "parallel/trace.h"

namespace loom::bench {

// Bytes of a tensor's elements, as a double for the byte counts of a step.
double bytes_in(const Tensor& t);

using Clock = std::chrono::steady_clock;

std::shared_ptr<nn::SequentialImpl> as_sequential(const nn::ModulePtr& m);

// What time_steps measured.
struct Timed {
  double step_s;
  int64_t peak_bytes;
  std::vector<trace::Event> events;
};

// The single-process strategies' devices, and the distinct ones among them.
std::vector<Device> devices_of(const CompareConfig& c);

std::set<Device> distinct_devices(const CompareConfig& c);

// Runs `step` warmup + steps times; times the steps with tracing on (the
// spans are how compute, communication and idle are told apart).
Timed time_steps(const std::function<void()>& step, const CompareConfig& c, const std::string& strategy);

// Seconds covered by the union of intervals [begin, end) in microseconds.
double covered_seconds(std::vector<std::pair<int64_t, int64_t>> spans);

// The GPU's view of a step, from spans timed on the GPU: compute is the time
// covered by each compute lane's spans (averaged over the lanes),
// communication the time covered by communication spans and by no compute
// span (exposed), idle the rest of the step.
bool split_on_gpu(Measurement& m, const std::vector<trace::Event>& events, const std::vector<int>& compute_lanes,
                  const std::string& comm_lane_prefix, int steps);

// Seconds per step spent in spans of `category` on `lane`.
double span_seconds(const std::vector<trace::Event>& events, const std::string& category, int lane, int steps);

// m's step split into communication, idle and the rest (compute).
void split_step(Measurement& m, double comm_s, double idle_s);

// One training step of `module` on (x, y), its phases traced on `lane`.
// On a GPU the spans time the GPU's work (trace.h).
void traced_step(nn::Module& module, optim::Optimizer& opt, const Workload& w, const Tensor& x, const Tensor& y,
                 int lane);

// The pipeline strategy's options: gpipe, 1f1b, interleaved (parallel::kInterleavedChunks a stage), zb-h1, zb-h2 or zb-v (2, in a V,
// scheduled for its parts' measured pass times).
parallel::PipelineOptions pipeline_options(const std::string& strategy, const CompareConfig& c);

std::vector<Device> repeated(const CompareConfig& c);

// The traces of strategies that run over MPI ranks: one file per rank.
std::string trace_name(const std::string& strategy, const CompareConfig& c);

// Every rank's `values`, in rank order (ranks under mpirun share what they measured).
std::vector<std::vector<double>> gather(parallel::ProcessGroup& group, const std::vector<double>& values);

// Runs `body(rank, group, device)` on the ranks: the processes under mpirun,
// or `n` threads of this process, each with its share of the cores (as ranks
// under mpirun get) and, for CUDA tensors, NCCL when their GPUs differ and
// host staging when they share one.
template <typename Result>
std::vector<Result> on_ranks(const CompareConfig& c, int n,
                             const std::function<Result(int, const std::shared_ptr<parallel::ProcessGroup>&, Device)>& body,
                             const std::function<std::vector<double>(const Result&)>& values,
                             const std::function<Result(const std::vector<double>&)>& from) {
  std::vector<Result> ranks;
  if (c.group) {
    const Result mine = body(c.group->rank(), c.group, c.device);
    for (const auto& v : gather(*c.group, values(mine))) ranks.push_back(from(v));
    return ranks;
  }
  auto groups = parallel::ThreadGroup::create(n);
  const std::vector<Device> devices = n == c.devices ? devices_of(c) : std::vector<Device>(n, c.device);
  const int threads_per_rank = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n);
  ranks.resize(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        omp_set_num_threads(threads_per_rank);
        ranks[r] = body(r, parallel::for_device(groups[r], devices[r]), devices[r]);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) LOOM_CHECK(errors[r].empty(), "rank ", r, ": ", errors[r]);
  return ranks;
}

// The runners, one per strategy (run_strategy picks).
Measurement run_single(const Workload& w, const CompareConfig& c);
Measurement run_dp(const Workload& w, const CompareConfig& c);
Measurement run_data_parallel(const std::string& strategy, const Workload& w, const CompareConfig& c);
// Which tensor-parallel row: tp, tp-sp (one replica over --devices ranks) or
// hybrid-tp (--mesh DxT: D replicas of T ranks).
struct TensorParallelRow {
  std::string name;
  int data = 1, tensor = 1;
  parallel::TokenLayout tokens = parallel::TokenLayout::kReplicated;
};
Measurement run_tensor_parallel(const Workload& w, const CompareConfig& c, const TensorParallelRow& row);
Measurement run_context_parallel(const Workload& w, const CompareConfig& c, parallel::SequenceSplit split,
                                 parallel::KeyValueExchange exchange);
Measurement run_hybrid(const Workload& w, const CompareConfig& c);
// cp-tp (--mesh CxT: tensor parallel over T ranks, each group on 1/C of every sequence).
Measurement run_context_tensor_parallel(const Workload& w, const CompareConfig& c);
Measurement run_layer_split(const Workload& w, const StagePlan& plan, const CompareConfig& c);
Measurement run_pipeline(const std::string& name, const Workload& w, const std::vector<int>& boundaries,
                         const CompareConfig& c);
Measurement run_pipeline_ranks(const std::string& name, const Workload& w, const std::vector<int>& boundaries,
                               const CompareConfig& c);

}  // namespace loom::bench
