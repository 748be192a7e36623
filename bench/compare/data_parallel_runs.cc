// The data-parallel runners: one device, DataParallel, and DDP (plain or with
// 16-bit buckets), ZeRO-1/2 and FSDP over ranks.
#include "bench/compare/measuring.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>

#include "autograd/engine.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "autograd/checkpoint.h"
#include "examples/models/models.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/thread_group.h"
#include "parallel/data_parallel.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/layer_split.h"
#include "parallel/pipeline/pipeline.h"
#include "parallel/sharding/container_units.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/memory_model.h"
#include "parallel/sharding/zero.h"
#include "parallel/trace.h"
#include "tensor/allocator.h"
#include "tensor/backend.h"
#include "tensor/stopwatch.h"

namespace loom::bench {

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

namespace {

// One rank's run of a data-parallel strategy on its share of the batch:
// warm-up, then timed steps.
struct DataRank {
  double step_s = 0, exposed_s = -1, bus_bytes = 0, peak_bytes = 0, buckets = 0;
  std::vector<double> values() const { return {step_s, exposed_s, bus_bytes, peak_bytes, buckets}; }
  static DataRank from(const std::vector<double>& v) { return {v[0], v[1], v[2], v[3], v[4]}; }
};


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
  if (parallel::is_ddp(strategy)) {
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
    // The layers of cnn and mlp, the blocks of gpt: as the planner predicts.
    auto wrap = parallel::wrap_named(parallel::container_units(*model));
    parallel::FullyShardedDataParallel fsdp(std::move(model), group, {.wrap = std::move(wrap)});
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

// The slowest rank's step; exposed communication averaged over the ranks
// that measured it (on a GPU shared by thread ranks, only the one that owns
// the trace; the others say -1, unknown).
Measurement combine_data_ranks(const std::string& strategy, const std::vector<DataRank>& ranks) {
  Measurement m{strategy};
  double exposed = 0, peak = 0;
  int measured = 0;
  for (const DataRank& r : ranks) {
    m.step_s = std::max(m.step_s, r.step_s);
    if (r.exposed_s >= 0) exposed += r.exposed_s, ++measured;
    peak = std::max(peak, r.peak_bytes);
  }
  if (measured > 0)
    split_step(m, exposed / measured, 0);
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
}  // namespace

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
  const int64_t largest_unit =
      strategy == "fsdp" ? parallel::largest_unit_numel(*w.model, parallel::container_units(*w.model)) : 0;
  const std::vector<DataRank> ranks = on_ranks<DataRank>(
      c, c.devices,
      [&](int r, const std::shared_ptr<parallel::ProcessGroup>& group, Device device) {
        return run_data_rank(strategy, w, c, models[c.group ? 0 : r], group, device, /*owns_trace=*/c.group || r == 0);
      },
      [](const DataRank& r) { return r.values(); }, DataRank::from);
  Measurement m = combine_data_ranks(strategy, ranks);
  // The compressed variants hold DDP's state (and a 16-bit copy of the buckets, not counted).
  m.modeled_state_bytes = modeled_state_bytes(parallel::is_ddp(strategy) ? "ddp" : strategy, w, c.devices, largest_unit);
  return m;
}

}  // namespace loom::bench
