#include "bench/compare/strategies.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <functional>
#include <optional>
#include <set>
#include <thread>

#include "autograd/engine.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "autograd/checkpoint.h"
#include "examples/models/models.h"
#include "examples/models/tensor_parallel_gpt.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/thread_group.h"
#include "parallel/data_parallel.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/layer_split.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/memory_model.h"
#include "parallel/sharding/zero.h"
#include "parallel/trace.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/stopwatch.h"

namespace loom::bench {
namespace {

// Bytes of a tensor's elements, as a double for the byte counts of a step.
double bytes_in(const Tensor& t) { return static_cast<double>(t.nbytes()); }

using Clock = std::chrono::steady_clock;

// The middle of three timings (or the middle element of any odd count).
double median3(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::shared_ptr<nn::SequentialImpl> as_sequential(const nn::ModulePtr& m) {
  return std::dynamic_pointer_cast<nn::SequentialImpl>(m);
}

// Forward and backward seconds of each child of a Sequential on the whole
// batch (median of three), and the bytes of each child's output.
struct ChildTimes {
  std::vector<double> forward_s, backward_s, output_bytes;
};

ChildTimes time_children(const Workload& w) {
  auto seq = as_sequential(w.model->clone());
  ChildTimes t;
  Tensor x = w.input;
  for (size_t i = 0; i < seq->size(); ++i) {
    Tensor in = is_floating(x.dtype()) ? x.detach().requires_grad_() : x;
    std::vector<double> fwd, bwd;
    Tensor out;
    for (int rep = 0; rep < 3; ++rep) {
      auto start = Clock::now();
      out = (*seq)[i]->forward(in);
      synchronize(w.input.device());
      fwd.push_back(seconds_since(start));
      Tensor grad = ones_like(out);
      start = Clock::now();
      if (out.requires_grad()) autograd::backward({out}, {grad});
      synchronize(w.input.device());
      bwd.push_back(seconds_since(start));
    }
    t.forward_s.push_back(median3(fwd));
    t.backward_s.push_back(median3(bwd));
    t.output_bytes.push_back(bytes_in(out));
    x = out.detach();
  }
  return t;
}

// Runs `step` warmup + steps times; times the steps with tracing on (the
// spans are how compute, communication and idle are told apart).
struct Timed {
  double step_s;
  int64_t peak_bytes;
  std::vector<trace::Event> events;
};

// The single-process strategies' devices, and the distinct ones among them.
std::vector<Device> devices_of(const CompareConfig& c) {
  return c.device_list.empty() ? std::vector<Device>(c.devices, c.device) : c.device_list;
}
std::set<Device> distinct_devices(const CompareConfig& c) {
  const std::vector<Device> all = devices_of(c);
  std::set<Device> out(all.begin(), all.end());
  out.insert(c.device);
  return out;
}

Timed time_steps(const std::function<void()>& step, const CompareConfig& c, const std::string& strategy) {
  const std::set<Device> used = distinct_devices(c);
  for (int i = 0; i < c.warmup; ++i) step();
  for (const Device& d : used) synchronize(d);
  for (const Device& d : used) reset_peak_memory_stats(d);
  trace::clear();
  trace::enable(true);
  const auto start = Clock::now();
  for (int i = 0; i < c.steps; ++i) step();
  for (const Device& d : used) synchronize(d);
  const double seconds = seconds_since(start);
  trace::enable(false);
  if (!c.trace_dir.empty()) trace::write_chrome_trace(c.trace_dir + "/" + strategy + ".json");
  int64_t peak = 0;  // the devices' peaks added: the memory the strategy needs in all
  for (const Device& d : used) peak += memory_stats(d).peak_allocated_bytes;
  return {seconds / c.steps, peak, trace::events()};
}

// Seconds covered by the union of intervals [begin, end) in microseconds.
double covered_seconds(std::vector<std::pair<int64_t, int64_t>> spans) {
  std::sort(spans.begin(), spans.end());
  int64_t total = 0, reach = INT64_MIN;
  for (auto [begin, end] : spans) {
    begin = std::max(begin, reach);
    if (end > begin) total += end - begin;
    reach = std::max(reach, end);
  }
  return total * 1e-6;
}

// The GPU's view of a step, from spans timed on the GPU: compute is the time
// covered by each compute lane's spans (averaged over the lanes),
// communication the time covered by communication spans and by no compute
// span (exposed), idle the rest of the step.
bool split_on_gpu(Measurement& m, const std::vector<trace::Event>& events, const std::vector<int>& compute_lanes,
                  const std::string& comm_lane_prefix, int steps) {
  std::vector<std::pair<int64_t, int64_t>> all_compute, comm, comm_and_compute;
  double compute = 0;
  for (int lane : compute_lanes) {
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (const trace::Event& e : events)
      if (e.lane == lane && e.category == "compute") spans.emplace_back(e.begin_us, e.end_us);
    compute += covered_seconds(spans) / compute_lanes.size();
    all_compute.insert(all_compute.end(), spans.begin(), spans.end());
  }
  if (all_compute.empty()) return false;
  const std::vector<std::string> names = trace::lane_names();
  for (const trace::Event& e : events)
    if (e.category == "communication" && names.at(e.lane).rfind(comm_lane_prefix, 0) == 0)
      comm.emplace_back(e.begin_us, e.end_us);
  comm_and_compute = all_compute;
  comm_and_compute.insert(comm_and_compute.end(), comm.begin(), comm.end());
  const double exposed = comm.empty() ? 0 : covered_seconds(comm_and_compute) - covered_seconds(all_compute);
  m.compute_s = std::min(compute / steps, m.step_s);
  m.comm_s = std::clamp(exposed / steps, 0.0, m.step_s - m.compute_s);
  m.idle_s = m.step_s - m.compute_s - m.comm_s;
  return true;
}

// Seconds per step spent in spans of `category` on `lane`.
double span_seconds(const std::vector<trace::Event>& events, const std::string& category, int lane, int steps) {
  int64_t us = 0;
  for (const trace::Event& e : events)
    if (e.category == category && e.lane == lane) us += e.end_us - e.begin_us;
  return us * 1e-6 / steps;
}

void split_step(Measurement& m, double comm_s, double idle_s) {
  m.comm_s = std::min(comm_s, m.step_s);
  m.idle_s = std::clamp(idle_s, 0.0, m.step_s - m.comm_s);
  m.compute_s = m.step_s - m.comm_s - m.idle_s;
}

// One training step of `module` on (x, y), its phases traced on `lane`.
// On a GPU the spans time the GPU's work (trace.h).
void traced_step(nn::Module& module, optim::Optimizer& opt, const Workload& w, const Tensor& x, const Tensor& y,
                 int lane) {
  const Device device = x.device();
  Tensor loss;
  {
    trace::Span span("forward", "compute", lane, device);
    loss = w.loss(module.forward(x), y);
  }
  opt.zero_grad();
  {
    trace::Span span("backward", "compute", lane, device);
    loss.backward();
  }
  trace::Span span("optimizer", "compute", lane, device);
  opt.step();
}

parallel::ScheduleKind schedule_kind(const std::string& strategy) {
  return strategy == "gpipe" ? parallel::ScheduleKind::GPipe : parallel::ScheduleKind::OneFOneB;
}

std::vector<Device> repeated(const CompareConfig& c) { return devices_of(c); }

Measurement run_single(const Workload& w, const CompareConfig& c) {
  nn::ModulePtr model = w.model->clone();
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  const int lane = trace::lane("single");
  Timed t = time_steps([&] { traced_step(*model, opt, w, w.input, w.target, lane); }, c, "single");
  Measurement m{"single"};
  m.step_s = t.step_s;
  m.peak_bytes = t.peak_bytes;
  if (!(c.device.is_cuda() && split_on_gpu(m, t.events, {lane}, "-", c.steps))) split_step(m, 0, 0);
  return m;
}

Measurement run_dp(const Workload& w, const CompareConfig& c) {
  nn::ModulePtr model = w.model->clone();
  parallel::DataParallel dp(model, repeated(c));
  optim::AdamW opt(dp->parameters(), {.lr = 1e-3});
  const int lane = trace::lane("dp step");
  Timed t = time_steps([&] { traced_step(*dp, opt, w, w.input, w.target, lane); }, c, "dp");
  Measurement m{"dp"};
  m.step_s = t.step_s;
  m.peak_bytes = t.peak_bytes;
  // Exposed communication: the main thread's broadcast and reduce. Idle: a
  // replica's time outside its own forward/backward and that communication.
  std::vector<int> replica_lanes;
  for (int r = 0; r < c.devices; ++r) replica_lanes.push_back(trace::lane("dp replica " + std::to_string(r)));
  if (!(c.device.is_cuda() && split_on_gpu(m, t.events, replica_lanes, "dp main", c.steps))) {
    const double comm = span_seconds(t.events, "communication", trace::lane("dp main"), c.steps);
    double idle = 0;
    for (int lane : replica_lanes) idle += t.step_s - comm - span_seconds(t.events, "compute", lane, c.steps);
    split_step(m, comm, idle / c.devices);
  }
  // Computed: parameters to N-1 replicas, gradients back, the batch scattered
  // and the outputs (and their gradients) gathered.
  double params = 0;
  for (const Tensor& p : model->parameters()) params += bytes_in(p);
  Tensor out = model->forward(w.input.narrow(0, 0, 1));
  const double n = c.devices;
  m.comm_bytes = 2 * (n - 1) * params + (n - 1) / n * (bytes_in(w.input) + 2 * bytes_in(out) * w.input.size(0));
  return m;
}

// The traces of strategies that run over MPI ranks: one file per rank.
std::string trace_name(const std::string& strategy, const CompareConfig& c) {
  return c.group ? strategy + "_rank" + std::to_string(c.group->rank()) : strategy;
}

// Every rank's `values`, in rank order (ranks under mpirun share what they measured).
std::vector<std::vector<double>> gather(parallel::ProcessGroup& group, const std::vector<double>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor all = empty({group.size() * n}, {.dtype = kFloat64});
  group.all_gather(all, from_vector(values))->wait();
  std::vector<std::vector<double>> out;
  for (int r = 0; r < group.size(); ++r) out.push_back(all.narrow(0, r * n, n).to_vector<double>());
  return out;
}

// One rank's run of a data-parallel strategy on its share of the batch:
// warm-up, then timed steps.
struct DataRank {
  double step_s = 0, exposed_s = -1, bus_bytes = 0, peak_bytes = 0, buckets = 0;
  std::vector<double> values() const { return {step_s, exposed_s, bus_bytes, peak_bytes, buckets}; }
  static DataRank from(const std::vector<double>& v) { return {v[0], v[1], v[2], v[3], v[4]}; }
};

// The FSDP units of a model: every child of a Sequential or ModuleList that
// holds parameters (the layers of cnn and mlp, the blocks of gpt).
std::set<std::string> fsdp_units_of(nn::Module& model) {
  std::set<std::string> units;
  for (const auto& [name, m] : model.named_modules()) {
    const bool container = dynamic_cast<nn::SequentialImpl*>(m.get()) || dynamic_cast<nn::ModuleListImpl*>(m.get());
    if (!container) continue;
    for (const auto& [child_name, child] : m->named_children())
      if (child->num_parameters() > 0) units.insert(name.empty() ? child_name : name + "." + child_name);
  }
  return units;
}

// A model trained by one of the data-parallel strategies: the module to run
// and the optimizer to step, and for ddp the reducer's view of the step.
struct DataTrainer {
  nn::ModulePtr module;
  std::unique_ptr<optim::Optimizer> opt;
  parallel::DistributedDataParallel ddp{nullptr};
  int64_t largest_unit = 0;  // fsdp: elements of the largest unit
};

DataTrainer make_data_trainer(const std::string& strategy, nn::ModulePtr model,
                              const std::shared_ptr<parallel::ProcessGroup>& group) {
  DataTrainer t;
  auto adamw = [](TensorList params) {
    return std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = 1e-3, .weight_decay = 0.01});
  };
  if (is_ddp(strategy)) {
    t.ddp = parallel::DistributedDataParallel(std::move(model), group);
    if (strategy != "ddp") t.ddp->register_comm_hook(parallel::compress_hook(strategy == "ddp_bf16" ? kBFloat16 : kFloat16));
    t.module = t.ddp;
    t.opt = adamw(t.ddp->parameters());
  } else if (strategy == "zero1" || strategy == "zero2") {
    t.module = model;
    t.opt = std::make_unique<parallel::ZeroRedundancyOptimizer>(model->parameters(), group, adamw,
                                                                 parallel::ZeroOptions{.stage = strategy == "zero1" ? 1 : 2});
  } else {
    LOOM_CHECK(strategy == "fsdp", "compare_parallel: not a data-parallel strategy: ", strategy);
    const std::set<std::string> units = fsdp_units_of(*model);
    parallel::FullyShardedDataParallel fsdp(
        std::move(model), group, {.wrap = [units](const std::string& name, const nn::Module&) { return units.count(name) > 0; }});
    for (const auto& unit : fsdp->units()) t.largest_unit = std::max(t.largest_unit, unit->flat().numel());
    t.module = fsdp;
    t.opt = adamw(fsdp->parameters());
  }
  return t;
}

// `owns_trace`: this rank turns tracing on and writes the trace file (one
// rank per process: ranks that are threads share the process's tracer).
DataRank run_data_rank(const std::string& strategy, const Workload& w, const CompareConfig& c, nn::ModulePtr model,
                       const std::shared_ptr<parallel::ProcessGroup>& group, Device device, bool owns_trace) {
  const int r = group->rank();
  const int64_t share = w.input.size(0) / group->size();
  DataTrainer trainer = make_data_trainer(strategy, std::move(model), group);
  Tensor x = w.input.narrow(0, r * share, share).to(device), y = w.target.narrow(0, r * share, share).to(device);
  const std::string rank_name = "rank" + std::to_string(r);
  const int lane = trace::lane(rank_name + "/compute");
  auto step = [&] { traced_step(*trainer.module, *trainer.opt, w, x, y, lane); };
  for (int i = 0; i < c.warmup; ++i) step();
  synchronize(device);
  group->barrier()->wait();
  if (owns_trace) {
    reset_peak_memory_stats(device);
    trace::clear();
    trace::enable(true);
  }
  group->barrier()->wait();
  const parallel::ReducerStats before = trainer.ddp ? trainer.ddp->reducer().stats() : parallel::ReducerStats{};
  const int64_t bus_before = group->stats().bus_bytes;
  const auto start = Clock::now();
  for (int i = 0; i < c.steps; ++i) step();
  synchronize(device);
  DataRank result;
  result.step_s = seconds_since(start) / c.steps;
  // Exposed communication, where it is known: DDP's host waits for its
  // buckets, or on a GPU the time the communication stream's spans (NCCL)
  // are not hidden behind compute.
  if (trainer.ddp) {
    result.exposed_s = (trainer.ddp->reducer().stats().exposed_wait_s - before.exposed_wait_s) / c.steps;
    result.buckets = static_cast<double>(trainer.ddp->reducer().buckets().size());
  }
  result.bus_bytes = static_cast<double>(group->stats().bus_bytes - bus_before) / c.steps;
  group->barrier()->wait();
  if (owns_trace) {
    trace::enable(false);
    result.peak_bytes = static_cast<double>(memory_stats(device).peak_allocated_bytes);
    Measurement gpu{strategy};
    gpu.step_s = result.step_s;
    if (device.is_cuda() && split_on_gpu(gpu, trace::events(), {lane}, rank_name + "/nccl", c.steps))
      result.exposed_s = gpu.comm_s;
    if (!c.trace_dir.empty()) trace::write_chrome_trace(c.trace_dir + "/" + trace_name(strategy, c) + ".json");
  }
  return result;
}

// The slowest rank's step; exposed communication averaged over ranks.
Measurement combine_data_ranks(const std::string& strategy, const std::vector<DataRank>& ranks) {
  Measurement m{strategy};
  double exposed = 0, peak = 0;
  for (const DataRank& r : ranks) {
    m.step_s = std::max(m.step_s, r.step_s);
    exposed += r.exposed_s / ranks.size();
    peak = std::max(peak, r.peak_bytes);
  }
  if (ranks[0].exposed_s >= 0)
    split_step(m, exposed, 0);
  else
    m.compute_s = m.step_s, m.split_known = false;
  m.peak_bytes = static_cast<int64_t>(peak);
  m.comm_bytes = ranks[0].bus_bytes;
  m.comm_bytes_measured = true;
  m.ddp_buckets = static_cast<int>(ranks[0].buckets);
  return m;
}

// The state each rank holds by the ZeRO accounting (parameters, gradients,
// Adam's state), for the model's float32 parameters.
int64_t modeled_state_bytes(const std::string& strategy, const Workload& w, int ranks, int64_t largest_unit) {
  return parallel::modeled_bytes(strategy, {.numel = w.model->num_parameters(),
                                            .element_size = static_cast<int64_t>(element_size(w.model->parameters().at(0).dtype())),
                                            .ranks = ranks,
                                            .unit_numel = largest_unit})
      .total();
}

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

Measurement run_data_parallel(const std::string& strategy, const Workload& w, const CompareConfig& c) {
  const int64_t batch = w.input.size(0);
  if (batch % c.devices != 0) {
    Measurement m{strategy};
    m.skipped = "batch " + std::to_string(batch) + " does not split over " + std::to_string(c.devices) + " ranks";
    return m;
  }
  std::vector<nn::ModulePtr> models;  // cloned here: the ranks' threads must not race on the generator
  const std::vector<Device> devices = devices_of(c);
  for (int r = 0; r < (c.group ? 1 : c.devices); ++r) models.push_back(w.model->clone(c.group ? c.device : devices[r]));
  int64_t largest_unit = 0;
  if (strategy == "fsdp") {
    const std::set<std::string> units = fsdp_units_of(*w.model);
    for (const auto& [name, m] : w.model->named_modules())
      if (units.count(name)) largest_unit = std::max(largest_unit, m->num_parameters());
  }
  const std::vector<DataRank> ranks = on_ranks<DataRank>(
      c, c.devices,
      [&](int r, const std::shared_ptr<parallel::ProcessGroup>& group, Device device) {
        return run_data_rank(strategy, w, c, models[c.group ? 0 : r], group, device, /*owns_trace=*/c.group || r == 0);
      },
      [](const DataRank& r) { return r.values(); }, DataRank::from);
  Measurement m = combine_data_ranks(strategy, ranks);
  // The compressed variants hold DDP's state (and a 16-bit copy of the buckets, not counted).
  m.modeled_state_bytes = modeled_state_bytes(is_ddp(strategy) ? "ddp" : strategy, w, c.devices, largest_unit);
  return m;
}

// Tensor parallel (Megatron) GPT over N ranks, every rank on the whole
// batch: the workload's GPT shape with the vocabulary padded to a multiple
// of N, its own weights (a benchmark: equality with one device is what
// tests/parallel/tensor_parallel_test.cc checks). The step is the slowest
// rank's; bytes are each rank's all-reduces.
Measurement run_tensor_parallel(const Workload& w, const CompareConfig& c) {
  Measurement m{"tp"};
  auto gpt = std::dynamic_pointer_cast<models::GPTImpl>(w.model);
  if (!gpt) {
    m.skipped = "tensor parallelism here splits a GPT (--model gpt)";
    return m;
  }
  models::GPTConfig config = gpt->config;
  if (config.n_head % c.devices != 0) {
    m.skipped = std::to_string(config.n_head) + " heads do not split over " + std::to_string(c.devices) + " ranks";
    return m;
  }
  config.vocab_size = (config.vocab_size + c.devices - 1) / c.devices * c.devices;
  struct TpRank {
    double step_s = 0, bus_bytes = 0, peak_bytes = 0;
  };
  const std::vector<TpRank> ranks = on_ranks<TpRank>(
      c, c.devices,
      [&](int r, const std::shared_ptr<parallel::ProcessGroup>& group, Device device) {
        models::TensorParallelGPT model(config, group);
        model->to(device);
        optim::AdamW opt(model->parameters(), {.lr = 1e-3});
        Tensor x = w.input.to(device), y = w.target.to(device);
        const int lane = trace::lane("rank" + std::to_string(r) + "/compute");
        auto step = [&] {
          Tensor loss;
          {
            trace::Span span("forward", "compute", lane, device);
            loss = model->loss(x, y);
          }
          opt.zero_grad();
          {
            trace::Span span("backward", "compute", lane, device);
            loss.backward();
          }
          trace::Span span("optimizer", "compute", lane, device);
          opt.step();
        };
        for (int i = 0; i < c.warmup; ++i) step();
        synchronize(device);
        group->barrier()->wait();
        const bool owns = c.group || r == 0;
        if (owns) {
          reset_peak_memory_stats(device);
          trace::clear();
          trace::enable(true);
        }
        group->barrier()->wait();
        const int64_t bus_before = group->stats().bus_bytes;
        const auto start = Clock::now();
        for (int i = 0; i < c.steps; ++i) step();
        synchronize(device);
        TpRank result{seconds_since(start) / c.steps,
                      static_cast<double>(group->stats().bus_bytes - bus_before) / c.steps, 0};
        group->barrier()->wait();
        if (owns) {
          trace::enable(false);
          result.peak_bytes = static_cast<double>(memory_stats(device).peak_allocated_bytes);
          if (!c.trace_dir.empty()) trace::write_chrome_trace(c.trace_dir + "/" + trace_name("tp", c) + ".json");
        }
        return result;
      },
      [](const TpRank& t) { return std::vector<double>{t.step_s, t.bus_bytes, t.peak_bytes}; },
      [](const std::vector<double>& v) { return TpRank{v[0], v[1], v[2]}; });
  double peak = 0;
  for (const TpRank& t : ranks) {
    m.step_s = std::max(m.step_s, t.step_s);
    peak = std::max(peak, t.peak_bytes);
  }
  m.compute_s = m.step_s;
  m.split_known = false;  // the all-reduces sit inside forward and backward: the trace shows them
  m.peak_bytes = static_cast<int64_t>(peak);
  m.comm_bytes = ranks[0].bus_bytes;
  m.comm_bytes_measured = true;
  return m;
}

// Hybrid data x pipeline on a D x P mesh: P-stage pipelines (1F1B), each on
// its 1/D of the batch, each stage's gradients averaged over its data group.
// The step is the slowest rank's; idle is each rank's time outside its
// passes, averaged; bytes are each rank's bus bytes (pipeline and data
// groups), averaged.
Measurement run_hybrid(const Workload& w, const CompareConfig& c) {
  Measurement m{"hybrid"};
  const int data = c.mesh_data, stages = c.mesh_pipeline;
  if (data < 1 || stages < 2) {
    m.skipped = "needs --mesh DxP (data x pipeline, P >= 2)";
    return m;
  }
  if (c.group && c.group->size() != data * stages) {
    m.skipped = "--mesh " + std::to_string(data) + "x" + std::to_string(stages) + " needs mpirun -np " +
                std::to_string(data * stages);
    return m;
  }
  const int64_t batch = w.input.size(0);
  if (batch % data != 0 || batch / data < c.micro_batches) {
    m.skipped = "batch " + std::to_string(batch) + " does not split into " + std::to_string(data) + " shares of at least " +
                std::to_string(c.micro_batches) + " micro-batches";
    return m;
  }
  const std::vector<int>& boundaries = c.mesh_boundaries;
  if (boundaries.empty()) {
    m.skipped = "the model is not a Sequential of at least " + std::to_string(stages) + " children";
    return m;
  }
  std::vector<nn::ModulePtr> models;
  for (int r = 0; r < (c.group ? 1 : data * stages); ++r) models.push_back(w.model->clone(c.device));
  struct HybridRank {
    double step_s = 0, idle_s = 0, bus_bytes = 0, peak_bytes = 0;
  };
  const std::vector<HybridRank> ranks = on_ranks<HybridRank>(
      c, data * stages,
      [&](int r, const std::shared_ptr<parallel::ProcessGroup>& world, Device device) {
        parallel::DeviceMesh mesh(world, {{"data", data}, {"pipeline", stages}});
        const int d = mesh.coordinate("data"), p = mesh.coordinate("pipeline");
        const bool first = p == 0, last = p == stages - 1;
        auto model = nn::Sequential(as_sequential(models[c.group ? 0 : r]));
        parallel::DistributedPipeline pipe(parallel::split_sequential(model, boundaries)[p], mesh.group("pipeline"),
                                           mesh.group("data"), {.micro_batches = c.micro_batches}, device);
        std::optional<optim::AdamW> opt;
        if (!pipe.parameters().empty()) opt.emplace(pipe.parameters(), optim::AdamOptions{.lr = 1e-3});
        const int64_t share = batch / data;
        Tensor x = w.input.narrow(0, d * share, share).to(device), y = w.target.narrow(0, d * share, share).to(device);
        auto step = [&] {
          if (opt) opt->zero_grad();
          pipe.train_step(first ? x : Tensor(), last ? y : Tensor(), w.loss);
          if (opt) opt->step();
        };
        for (int i = 0; i < c.warmup; ++i) step();
        world->barrier()->wait();
        const bool owns = c.group || r == 0;  // one rank per process turns tracing on and writes the file
        if (owns) {
          reset_peak_memory_stats(device);
          trace::clear();
          trace::enable(true);
        }
        world->barrier()->wait();
        const int64_t bus_before = mesh.group("pipeline")->stats().bus_bytes + mesh.group("data")->stats().bus_bytes;
        HybridRank result;
        const auto start = Clock::now();
        for (int i = 0; i < c.steps; ++i) {
          step();
          result.idle_s += (pipe.step_seconds() - pipe.stats().busy_seconds) / c.steps;
        }
        synchronize(device);
        result.step_s = seconds_since(start) / c.steps;
        result.bus_bytes = static_cast<double>(mesh.group("pipeline")->stats().bus_bytes +
                                               mesh.group("data")->stats().bus_bytes - bus_before) /
                           c.steps;
        world->barrier()->wait();
        if (owns) {
          trace::enable(false);
          result.peak_bytes = static_cast<double>(memory_stats(device).peak_allocated_bytes);
          if (!c.trace_dir.empty()) trace::write_chrome_trace(c.trace_dir + "/" + trace_name("hybrid", c) + ".json");
        }
        return result;
      },
      [](const HybridRank& h) { return std::vector<double>{h.step_s, h.idle_s, h.bus_bytes, h.peak_bytes}; },
      [](const std::vector<double>& v) { return HybridRank{v[0], v[1], v[2], v[3]}; });
  double idle = 0, peak = 0;
  for (const HybridRank& h : ranks) {
    m.step_s = std::max(m.step_s, h.step_s);
    idle += h.idle_s / ranks.size();
    m.comm_bytes += h.bus_bytes / ranks.size();
    peak = std::max(peak, h.peak_bytes);
  }
  split_step(m, 0, idle);
  m.peak_bytes = static_cast<int64_t>(peak);
  m.comm_bytes_measured = true;
  return m;
}

Measurement run_layer_split(const Workload& w, const StagePlan& plan, const CompareConfig& c) {
  auto model = nn::Sequential(as_sequential(w.model->clone()));
  parallel::LayerSplit split(parallel::split_sequential(model, plan.boundaries), repeated(c));
  optim::AdamW opt(split->parameters(), {.lr = 1e-3});
  const int lane = trace::lane("layer split step");
  Timed t = time_steps([&] { traced_step(*split, opt, w, w.input, w.target, lane); }, c, "layer_split");
  Measurement m{"layer_split"};
  m.step_s = t.step_s;
  m.peak_bytes = t.peak_bytes;
  // One device works at a time: each waits (N-1)/N of the step.
  if (!(c.device.is_cuda() && split_on_gpu(m, t.events, {lane}, "-", c.steps)))
    split_step(m, 0, t.step_s * (c.devices - 1) / c.devices);
  else  // the GPU's compute is the whole model's; each device has its share of it
    split_step(m, 0, t.step_s - m.compute_s / c.devices);
  // Computed: each boundary's activations forward, their gradients back.
  for (double bytes : plan.profile.boundary_bytes) m.comm_bytes += 2 * bytes;
  return m;
}

Measurement run_pipeline(const std::string& name, const Workload& w, const std::vector<int>& boundaries,
                         const CompareConfig& c) {
  auto model = nn::Sequential(as_sequential(w.model->clone()));
  parallel::Pipeline pipe(parallel::split_sequential(model, boundaries), repeated(c),
                          {.micro_batches = c.micro_batches, .schedule = schedule_kind(name)});
  optim::AdamW opt(pipe.parameters(), {.lr = 1e-3});
  double bubble = 0, bytes = 0;
  int counted = 0;
  Timed t = time_steps(
      [&] {
        opt.zero_grad();
        pipe.train_step(w.input, w.target, w.loss);
        opt.step();
        if (trace::enabled()) {  // the timed steps
          bubble += pipe.stats().bubble_fraction * pipe.stats().step_seconds;
          for (const auto& s : pipe.stats().stages) bytes += s.bytes_sent;
          ++counted;
        }
      },
      c, name);
  Measurement m{name};
  m.step_s = t.step_s;
  m.peak_bytes = t.peak_bytes;
  std::vector<int> stage_lanes;
  const std::vector<Device> devices = repeated(c);
  for (size_t s = 0; s < devices.size(); ++s)
    stage_lanes.push_back(trace::lane("stage " + std::to_string(s) + " (" + devices[s].str() + ")"));
  if (!(c.device.is_cuda() && split_on_gpu(m, t.events, stage_lanes, "-", c.steps)))
    split_step(m, 0, bubble / std::max(1, counted));
  m.comm_bytes = bytes / std::max(1, counted);
  m.comm_bytes_measured = true;
  return m;
}

// GPipe or 1F1B with one stage per MPI rank (DistributedPipeline). Idle is
// the time each rank's train_step spends outside its forward and backward
// passes (the bubble and its messages), averaged over ranks; the step is the
// slowest rank's.
Measurement run_pipeline_ranks(const std::string& name, const Workload& w, const std::vector<int>& boundaries,
                               const CompareConfig& c) {
  parallel::ProcessGroup& group = *c.group;
  const int r = group.rank();
  const bool first = r == 0, last = r == group.size() - 1;
  auto model = nn::Sequential(as_sequential(w.model->clone()));
  parallel::DistributedPipeline pipe(parallel::split_sequential(model, boundaries)[r], c.group,
                                     {.micro_batches = c.micro_batches, .schedule = schedule_kind(name)}, c.device);
  // A stage of only activations (a ReLU between cuts) has nothing to optimise.
  std::optional<optim::AdamW> opt;
  if (!pipe.parameters().empty()) opt.emplace(pipe.parameters(), optim::AdamOptions{.lr = 1e-3});
  double idle = 0, bytes = 0;
  int counted = 0;
  Timed t = time_steps(
      [&] {
        if (opt) opt->zero_grad();
        pipe.train_step(first ? w.input : Tensor(), last ? w.target : Tensor(), w.loss);
        if (opt) opt->step();
        if (trace::enabled()) {  // the timed steps
          idle += pipe.step_seconds() - pipe.stats().busy_seconds;
          bytes += static_cast<double>(pipe.stats().bytes_sent);
          ++counted;
        }
      },
      c, trace_name(name, c));
  std::vector<double> mine{t.step_s, idle / std::max(1, counted), bytes / std::max(1, counted),
                           static_cast<double>(t.peak_bytes)};
  Measurement m{name};
  double mean_idle = 0, peak = 0;
  const auto ranks = gather(group, mine);
  for (const auto& v : ranks) {
    m.step_s = std::max(m.step_s, v[0]);
    mean_idle += v[1] / ranks.size();
    m.comm_bytes += v[2];
    peak = std::max(peak, v[3]);
  }
  split_step(m, 0, mean_idle);
  m.peak_bytes = static_cast<int64_t>(peak);
  m.comm_bytes_measured = true;
  return m;
}

}  // namespace

namespace {

// Cuts the children into `stages` parts where the running forward + backward
// time first passes k/stages of the whole, keeping at least one child per stage.
std::vector<int> balanced_cuts(const ChildTimes& t, int stages) {
  const int n = static_cast<int>(t.forward_s.size());
  double total = 0;
  for (int i = 0; i < n; ++i) total += t.forward_s[i] + t.backward_s[i];
  std::vector<int> cuts;
  double running = 0;
  for (int i = 0; i < n && static_cast<int>(cuts.size()) < stages - 1; ++i) {
    running += t.forward_s[i] + t.backward_s[i];
    const int k = static_cast<int>(cuts.size()) + 1;
    const int children_left = n - (i + 1), stages_left = stages - k;
    if ((running >= total * k / stages || children_left == stages_left) && children_left >= stages_left)
      cuts.push_back(i + 1);
  }
  return cuts;
}

}  // namespace

StagePlan plan_stages(const Workload& w, int stages) {
  StagePlan plan;
  Profile& p = plan.profile;
  p.input_bytes = bytes_in(w.input);
  for (const Tensor& t : w.model->parameters()) p.parameter_bytes += bytes_in(t);
  auto seq = as_sequential(w.model);
  if (seq && static_cast<int>(seq->size()) >= stages) {
    const ChildTimes t = time_children(w);
    plan.boundaries = balanced_cuts(t, stages);
    std::vector<int> ends = plan.boundaries;
    ends.push_back(static_cast<int>(t.forward_s.size()));
    int begin = 0;
    for (int end : ends) {
      double f = 0, b = 0;
      for (int i = begin; i < end; ++i) f += t.forward_s[i], b += t.backward_s[i];
      p.stage_forward_s.push_back(f);
      p.stage_backward_s.push_back(b);
      if (end < ends.back()) p.boundary_bytes.push_back(t.output_bytes[end - 1]);
      begin = end;
    }
  }
  // The whole model's forward and backward (the only "stage" of a model that
  // is not cut), the optimizer step, and the output size.
  nn::ModulePtr model = w.model->clone();
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  std::vector<double> fwd, bwd, optimizer;
  for (int rep = 0; rep < 3; ++rep) {
    auto start = Clock::now();
    Tensor out = model->forward(w.input);
    Tensor loss = w.loss(out, w.target);
    synchronize(w.input.device());
    fwd.push_back(seconds_since(start));
    opt.zero_grad();
    start = Clock::now();
    loss.backward();
    synchronize(w.input.device());
    bwd.push_back(seconds_since(start));
    start = Clock::now();
    opt.step();
    synchronize(w.input.device());
    optimizer.push_back(seconds_since(start));
    p.output_bytes = bytes_in(out);
  }
  p.optimizer_s = median3(optimizer);
  if (p.stage_forward_s.empty()) {
    p.stage_forward_s = {median3(fwd)};
    p.stage_backward_s = {median3(bwd)};
  }
  return plan;
}

namespace {

// Runs a module's forward under activation checkpointing, holding it as a
// child so that its parameters keep their place.
class CheckpointedImpl : public nn::Module {
 public:
  explicit CheckpointedImpl(nn::ModulePtr inner) : Module("Checkpointed"), inner_(std::move(inner)) {
    register_module("inner", inner_);
  }
  Tensor forward(const Tensor& x) override {
    return autograd::checkpoint([inner = inner_](const Tensor& in) { return inner->forward(in); }, x);
  }
  nn::ModulePtr clone(std::optional<Device> device) const override {
    return std::make_shared<CheckpointedImpl>(inner_->clone(device));
  }

 private:
  nn::ModulePtr inner_;
};

// A Sequential in about sqrt(n) checkpointed segments.
class CheckpointedSequentialImpl : public nn::Module {
 public:
  explicit CheckpointedSequentialImpl(nn::Sequential seq) : Module("CheckpointedSequential"), seq_(seq) {
    register_module("seq", seq);
    segments_ = std::max(1, static_cast<int>(std::lround(std::sqrt(static_cast<double>(seq->size())))));
  }
  Tensor forward(const Tensor& x) override { return nn::checkpoint_sequential(seq_, segments_, x); }
  nn::ModulePtr clone(std::optional<Device> device) const override {
    return std::make_shared<CheckpointedSequentialImpl>(nn::Sequential(seq_->clone(device)));
  }

 private:
  nn::Sequential seq_;
  int segments_ = 1;
};

// A GPT whose blocks each run under checkpointing (GPTImpl::forward, block by block).
class CheckpointedGptImpl : public nn::Module {
 public:
  explicit CheckpointedGptImpl(models::GPT gpt) : Module("CheckpointedGPT"), gpt_(gpt) { register_module("gpt", gpt); }
  Tensor forward(const Tensor& idx) override {
    Tensor positions = arange(idx.size(1), {.dtype = kInt64, .device = idx.device()});
    Tensor x = gpt_->dropout->forward(gpt_->wte->forward(idx) + gpt_->wpe->forward(positions));
    for (size_t l = 0; l < gpt_->blocks->size(); ++l) {
      nn::ModulePtr block = (*gpt_->blocks)[l];
      x = autograd::checkpoint([block](const Tensor& in) { return block->forward(in); }, x);
    }
    return gpt_->head->forward(gpt_->ln_f->forward(x));
  }
  nn::ModulePtr clone(std::optional<Device> device) const override {
    return std::make_shared<CheckpointedGptImpl>(models::GPT(gpt_->clone(device)));
  }

 private:
  models::GPT gpt_;
};

}  // namespace

Workload checkpointed(const Workload& w) {
  Workload out = w;
  if (auto seq = as_sequential(w.model))
    out.model = std::make_shared<CheckpointedSequentialImpl>(nn::Sequential(seq->clone()));
  else if (auto gpt = std::dynamic_pointer_cast<models::GPTImpl>(w.model))
    out.model = std::make_shared<CheckpointedGptImpl>(models::GPT(gpt->clone()));
  else
    out.model = std::make_shared<CheckpointedImpl>(w.model->clone());
  return out;
}

Measurement run_strategy(const std::string& strategy, const Workload& w, const StagePlan& plan,
                         const CompareConfig& config) {
  const std::string suffix = "_ckpt";
  if (strategy.size() > suffix.size() && strategy.compare(strategy.size() - suffix.size(), suffix.size(), suffix) == 0) {
    Measurement m = run_strategy(strategy.substr(0, strategy.size() - suffix.size()), checkpointed(w), plan, config);
    m.strategy = strategy;
    return m;
  }
  const std::vector<int>& boundaries = plan.boundaries;
  Measurement skipped{strategy};
  const bool over_ranks = config.group != nullptr;
  if (over_ranks && (strategy == "dp" || strategy == "layer_split")) {
    skipped.skipped = "one process drives every device; run compare_parallel without mpirun";
    return skipped;
  }
  if (strategy == "single") return run_single(w, config);
  if (strategy == "dp") return run_dp(w, config);
  if (is_ddp(strategy) || strategy == "zero1" || strategy == "zero2" || strategy == "fsdp")
    return run_data_parallel(strategy, w, config);
  if (strategy == "hybrid") return run_hybrid(w, config);
  if (strategy == "tp") return run_tensor_parallel(w, config);
  if (boundaries.empty()) {
    skipped.skipped = "the model is not a Sequential of at least " + std::to_string(config.devices) + " children";
    return skipped;
  }
  if (strategy == "layer_split") return run_layer_split(w, plan, config);
  if (strategy == "gpipe" || strategy == "1f1b")
    return over_ranks ? run_pipeline_ranks(strategy, w, boundaries, config) : run_pipeline(strategy, w, boundaries, config);
  LOOM_FAIL("compare_parallel: unknown strategy '", strategy, "'");
}

}  // namespace loom::bench
