// The model-parallel runners: tensor parallel, the hybrid mesh, layer split
// and the pipelines (in one process, or over ranks).
#include "bench/compare/measuring.h"

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
#include "examples/models/gpt_plans.h"
#include "examples/models/models.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/comm/for_device.h"
#include "parallel/comm/thread_group.h"
#include "parallel/data_parallel.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/parallelize.h"
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

// Columns of a pipeline step's chart (--timelines).
constexpr int kTimelineWidth = 100;

namespace {

// What one rank of a model-parallel strategy measured, per step.
struct RankSteps {
  double step_s = 0, bus_bytes = 0, peak_bytes = 0;
};

// A training step with its phases traced on `lane`: forward (`loss`), backward, the optimizer.
void traced_loss_step(const std::function<Tensor()>& loss_of_step, optim::Optimizer& opt, int lane, Device device) {
  Tensor loss;
  {
    trace::Span span("forward", "compute", lane, device);
    loss = loss_of_step();
  }
  opt.zero_grad();
  {
    trace::Span span("backward", "compute", lane, device);
    loss.backward();
  }
  trace::Span span("optimizer", "compute", lane, device);
  opt.step();
}

// One rank's steps: c.warmup untimed, then c.steps timed with tracing on in
// the rank that writes the trace; the bytes its groups moved (`bus_bytes`
// before and after) and its peak memory.
RankSteps time_rank_steps(const std::string& strategy, const CompareConfig& c, int rank,
                          parallel::ProcessGroup& world, Device device, const std::function<void()>& step,
                          const std::function<int64_t()>& bus_bytes) {
  for (int i = 0; i < c.warmup; ++i) step();
  synchronize(device);
  world.barrier()->wait();
  const bool owns = c.group || rank == 0;  // one rank per process turns tracing on and writes the file
  if (owns) {
    reset_peak_memory_stats(device);
    trace::clear();
    trace::enable(true);
  }
  world.barrier()->wait();
  const int64_t bus_before = bus_bytes();
  const auto start = Clock::now();
  for (int i = 0; i < c.steps; ++i) step();
  synchronize(device);
  RankSteps result{seconds_since(start) / c.steps, static_cast<double>(bus_bytes() - bus_before) / c.steps, 0};
  world.barrier()->wait();
  if (owns) {
    trace::enable(false);
    result.peak_bytes = static_cast<double>(memory_stats(device).peak_allocated_bytes);
    if (!c.trace_dir.empty()) trace::write_chrome_trace(c.trace_dir + "/" + trace_name(strategy, c) + ".json");
  }
  return result;
}

// Runs `body` on n ranks (on_ranks) and makes their measurements one row:
// the slowest rank's step, the ranks' average bytes, the largest peak. The
// collectives sit inside forward and backward, so the step is not split
// into compute and communication: the trace shows them.
void measure_on_ranks(Measurement& m, const CompareConfig& c, int n,
                      const std::function<RankSteps(int, const std::shared_ptr<parallel::ProcessGroup>&, Device)>& body) {
  const std::vector<RankSteps> ranks = on_ranks<RankSteps>(
      c, n, body, [](const RankSteps& t) { return std::vector<double>{t.step_s, t.bus_bytes, t.peak_bytes}; },
      [](const std::vector<double>& v) { return RankSteps{v[0], v[1], v[2]}; });
  double peak = 0;
  for (const RankSteps& t : ranks) {
    m.step_s = std::max(m.step_s, t.step_s);
    m.comm_bytes += t.bus_bytes / ranks.size();
    peak = std::max(peak, t.peak_bytes);
  }
  m.compute_s = m.step_s;
  m.split_known = false;
  m.peak_bytes = static_cast<int64_t>(peak);
  m.comm_bytes_measured = true;
}

}  // namespace

// Tensor parallel (Megatron) GPT: the workload's GPT shape with the
// vocabulary padded to a multiple of the tensor ranks, its own weights (a
// benchmark: equality with one device is what
// tests/parallel/tensor_parallel_test.cc checks). The tp and tp-sp rows run
// one replica over N ranks, every rank on the whole batch; hybrid-tp
// (--mesh DxT) runs D replicas of T ranks, each on its 1/D of the batch, DDP
// averaging each slice over the ranks that hold it. The step is the slowest
// rank's; bytes are each rank's collectives (both groups), averaged.
Measurement run_tensor_parallel(const Workload& w, const CompareConfig& c, const TensorParallelRow& row) {
  Measurement m{row.name};
  auto gpt = std::dynamic_pointer_cast<models::GPTImpl>(w.model);
  if (!gpt) {
    m.skipped = "tensor parallelism here splits a GPT (--model gpt)";
    return m;
  }
  const int data = row.data, tensor = row.tensor;
  if (data < 1 || tensor < 1) {
    m.skipped = "needs --mesh DxT (data x tensor)";
    return m;
  }
  if (c.group && c.group->size() != data * tensor) {
    m.skipped = "needs mpirun -np " + std::to_string(data * tensor);
    return m;
  }
  models::GPTConfig config = gpt->config;
  if (config.n_head % tensor != 0) {
    m.skipped = std::to_string(config.n_head) + " heads do not split over " + std::to_string(tensor) + " ranks";
    return m;
  }
  const int64_t batch = w.input.size(0);
  if (batch % data != 0) {
    m.skipped = "batch " + std::to_string(batch) + " does not split into " + std::to_string(data) + " shares";
    return m;
  }
  if (row.tokens == parallel::TokenLayout::kSequenceSharded &&
      (config.block_size % tensor != 0 || w.input.size(1) % tensor != 0)) {
    m.skipped = "the sequence (" + std::to_string(w.input.size(1)) + ") does not split over " +
                std::to_string(tensor) + " ranks";
    return m;
  }
  config.vocab_size = (config.vocab_size + tensor - 1) / tensor * tensor;
  measure_on_ranks(m, c, data * tensor, [&](int r, const std::shared_ptr<parallel::ProcessGroup>& world, Device device) {
    parallel::DeviceMesh mesh(world, {{"data", data}, {"tensor", tensor}});
    const std::shared_ptr<parallel::ProcessGroup>& group = mesh.group("tensor");
    models::GPT model(config);  // cut in place to this rank's slices by the GPT's plan
    parallel::parallelize(*model, group,
                          models::gpt_tensor_parallel_plan(row.tokens == parallel::TokenLayout::kSequenceSharded));
    model->to(device);
    parallel::DistributedDataParallel replica{nullptr};
    if (data > 1) replica = parallel::DistributedDataParallel(model.ptr(), mesh.group("data"));
    optim::AdamW opt(model->parameters(), {.lr = 1e-3});
    const int64_t share = batch / data, first = share * mesh.coordinate("data");
    Tensor x = w.input.narrow(0, first, share).to(device), y = w.target.narrow(0, first, share).to(device);
    const int lane = trace::lane("rank" + std::to_string(r) + "/compute");
    auto loss = [&] {
      return parallel::vocab_parallel_cross_entropy(data > 1 ? replica->forward(x) : model->forward(x), y, group);
    };
    return time_rank_steps(m.strategy, c, r, *world, device, [&] { traced_loss_step(loss, opt, lane, device); },
                           [&] { return mesh.group("tensor")->stats().bus_bytes + mesh.group("data")->stats().bus_bytes; });
  });
  return m;
}

// Context parallel GPT over N ranks: each rank runs the whole model on its
// 1/N of every sequence's tokens (cp: contiguous shares, cp-zigzag: an early
// and a late chunk each), attention all-gathers the keys and values (cp-ring,
// cp-ring-zigzag: passes them round the ranks; cp-ulysses, cp-ulysses-zigzag:
// all-to-alls give each rank 1/N of the heads), and DDP averages the weights'
// gradients. The step is the slowest rank's; bytes are each rank's (the keys
// and values, then the gradients), averaged.
Measurement run_context_parallel(const Workload& w, const CompareConfig& c, parallel::SequenceSplit split,
                                 parallel::KeyValueExchange exchange) {
  const std::string form = exchange == parallel::KeyValueExchange::kRing        ? "cp-ring"
                           : exchange == parallel::KeyValueExchange::kAllToAll ? "cp-ulysses"
                                                                               : "cp";
  Measurement m{form + (split == parallel::SequenceSplit::kZigZag ? "-zigzag" : "")};
  auto gpt = std::dynamic_pointer_cast<models::GPTImpl>(w.model);
  if (!gpt) {
    m.skipped = "context parallelism here splits a GPT's sequences (--model gpt)";
    return m;
  }
  const int64_t tokens = w.input.size(1);
  if (tokens % (split == parallel::SequenceSplit::kZigZag ? 2 * c.devices : c.devices) != 0) {
    m.skipped = "the sequence (" + std::to_string(tokens) + ") does not split over " + std::to_string(c.devices) +
                " ranks";
    return m;
  }
  std::vector<nn::ModulePtr> models;
  for (int r = 0; r < (c.group ? 1 : c.devices); ++r) models.push_back(w.model->clone(c.device));
  measure_on_ranks(m, c, c.devices, [&](int r, const std::shared_ptr<parallel::ProcessGroup>& group, Device device) {
    models::GPT copy(std::dynamic_pointer_cast<models::GPTImpl>(models[c.group ? 0 : r]));
    copy->to(device);
    parallel::context_parallel(*copy, group, models::gpt_context_parallel({.split = split, .exchange = exchange}));
    parallel::DistributedDataParallel replica(copy, group);
    optim::AdamW opt(copy->parameters(), {.lr = 1e-3});
    Tensor x = parallel::shard_sequence(w.input, *group, split).to(device),
           y = parallel::shard_sequence(w.target, *group, split).to(device);
    const int lane = trace::lane("rank" + std::to_string(r) + "/compute");
    auto loss = [&] { return w.loss(replica->forward(x), y); };
    return time_rank_steps(m.strategy, c, r, *group, device, [&] { traced_loss_step(loss, opt, lane, device); },
                           [&] { return group->stats().bus_bytes; });
  });
  return m;
}

// Context x tensor parallel GPT on a C x T mesh (cp-tp, --mesh CxT): T-way
// tensor-parallel slices, each group of them on its 1/C of every sequence
// (zig-zag, ring attention over the ranks that hold the same heads), DDP
// averaging each slice over its context group. The step is the slowest
// rank's; bytes are each rank's collectives (all three groups), averaged.
Measurement run_context_tensor_parallel(const Workload& w, const CompareConfig& c) {
  Measurement m{"cp-tp"};
  auto gpt = std::dynamic_pointer_cast<models::GPTImpl>(w.model);
  const int context = c.mesh_data, tensor = c.mesh_pipeline;
  if (!gpt) {
    m.skipped = "context x tensor parallelism here splits a GPT (--model gpt)";
    return m;
  }
  if (context < 1 || tensor < 1) {
    m.skipped = "needs --mesh CxT (context x tensor)";
    return m;
  }
  if (c.group && c.group->size() != context * tensor) {
    m.skipped = "needs mpirun -np " + std::to_string(context * tensor);
    return m;
  }
  models::GPTConfig config = gpt->config;
  const int64_t tokens = w.input.size(1);
  if (config.n_head % tensor != 0 || tokens % (2 * context) != 0) {
    m.skipped = std::to_string(config.n_head) + " heads over " + std::to_string(tensor) + " ranks, or " +
                std::to_string(tokens) + " tokens in two chunks for each of " + std::to_string(context) +
                " ranks: one does not split";
    return m;
  }
  config.vocab_size = (config.vocab_size + tensor - 1) / tensor * tensor;
  constexpr auto kZigZag = parallel::SequenceSplit::kZigZag;
  auto rank = [&](int r, const std::shared_ptr<parallel::ProcessGroup>& world, Device device) {
    parallel::DeviceMesh mesh(world, {{"context", context}, {"tensor", tensor}});
    models::GPT model(config);
    parallel::parallelize(*model, mesh.group("tensor"), models::gpt_tensor_parallel_plan());
    parallel::context_parallel(*model, mesh.group("context"),
                               models::gpt_context_parallel({.split = kZigZag, .exchange = parallel::KeyValueExchange::kRing}));
    model->to(device);
    parallel::DistributedDataParallel replica(model, mesh.group("context"));
    optim::AdamW opt(model->parameters(), {.lr = 1e-3});
    Tensor x = parallel::shard_sequence(w.input, *mesh.group("context"), kZigZag).to(device),
           y = parallel::shard_sequence(w.target, *mesh.group("context"), kZigZag).to(device);
    const int lane = trace::lane("rank" + std::to_string(r) + "/compute");
    auto loss = [&] { return parallel::vocab_parallel_cross_entropy(replica->forward(x), y, mesh.group("tensor")); };
    auto bus_bytes = [&] { return mesh.group("tensor")->stats().bus_bytes + mesh.group("context")->stats().bus_bytes; };
    return time_rank_steps(m.strategy, c, r, *world, device, [&] { traced_loss_step(loss, opt, lane, device); },
                           bus_bytes);
  };
  measure_on_ranks(m, c, context * tensor, rank);
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
  parallel::Pipeline pipe(parallel::split_sequential(model, boundaries), repeated(c), pipeline_options(name, c));
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
  m.timeline = parallel::timeline(pipe.stats(), kTimelineWidth);
  return m;
}

// GPipe, 1F1B, interleaved, ZB-H1 or ZB-V with one stage per MPI rank (DistributedPipeline). Idle is
// the time each rank's train_step spends outside its forward and backward
// passes (the bubble and its messages), averaged over ranks; the step is the
// slowest rank's.
Measurement run_pipeline_ranks(const std::string& name, const Workload& w, const std::vector<int>& boundaries,
                               const CompareConfig& c) {
  parallel::ProcessGroup& group = *c.group;
  const int r = group.rank();
  const parallel::PipelineOptions options = pipeline_options(name, c);
  // The whole clone is a temporary: a rank keeps its own stage's layers only,
  // as a pipeline over machines would (once, every rank held every layer's
  // weights, and its peak memory counted them).
  parallel::DistributedPipeline pipe(
      parallel::stage_chunks(parallel::split_sequential(nn::Sequential(as_sequential(w.model->clone())), boundaries), r,
                             group.size(), parallel::placement_of(options.schedule)),
      c.group, options, c.device);
  const bool first = r == 0, last = r == pipe.loss_rank();
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
  m.timeline = pipe.timeline(kTimelineWidth);  // every rank takes part; rank 0 gets the chart
  return m;
}
}  // namespace loom::bench
