#include "parallel/planner/planner.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <numeric>
#include <sstream>
#include <thread>

#include "parallel/pipeline/balance.h"
#include "parallel/sharding/memory_model.h"
#include "tensor/error.h"
#include "tensor/memory_budget.h"

namespace loom::parallel {
namespace {

// Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models": a block keeps 34 bytes per token and hidden unit (and
// the attention scores, which fused attention does not keep); tensor
// parallelism over t ranks cuts 24 of them, sequence parallelism the other 10.
constexpr double kBlockBytes = 34, kReplicatedWithoutSp = 10;

// Every row the planner can make.
const char* const kStrategies[] = {"single", "ddp", "zero1", "zero2", "fsdp", "tp", "tp-sp", "cp",
                                   "gpipe", "1f1b", "hybrid", "hybrid-tp"};

// What every row shares: the profile, the batch, the rates.
struct Context {
  const ModelProfile& p;
  const PlanOptions& o;
  int64_t batch;
  double rate;               // FLOP/s one device reaches
  double activation_scale;   // 0.5 under 16- and 8-bit precisions
  int64_t parameter_bytes() const { return p.parameters * p.element_size; }
  // A step's activations and temporaries at n samples, in the plan's precision.
  double activations(double n) const { return p.step_bytes.fixed + activation_scale * p.step_bytes.per_sample * n; }
  double forward_s(double n) const { return p.forward_flops_per_sample * n / rate; }
  double backward_s(double n) const { return (p.flops_per_sample - p.forward_flops_per_sample) * n / rate; }
  int buckets() const {
    return static_cast<int>(std::max<int64_t>(1, (parameter_bytes() + o.ddp_bucket_bytes - 1) / o.ddp_bucket_bytes));
  }
};

MemoryParts state_parts(const Context& c, const std::string& accounting, int ranks) {
  const ModelShape shape{.numel = c.p.parameters,
                         .element_size = c.p.element_size,
                         .state_tensors = c.p.optimizer_state_tensors,
                         .ranks = ranks,
                         .unit_numel = c.p.largest_part};
  const ModelBytes b = modeled_bytes(accounting, shape);
  MemoryParts m;
  m.parameters = b.parameters;
  m.gradients = b.gradients;
  // float32 optimizer state whatever the parameters' element size
  m.optimizer_state = b.optimizer_state / c.p.element_size * 4;
  return m;
}

StrategyPlan row(const std::string& strategy, const std::string& mesh, int ranks, int64_t batch_per_rank) {
  StrategyPlan r;
  r.strategy = strategy;
  r.mesh = mesh;
  r.ranks = ranks;
  r.batch_per_rank = batch_per_rank;
  return r;
}

// The data-parallel family: every rank the whole model on batch / N.
StrategyPlan data_parallel(const Context& c, const std::string& strategy, int n) {
  StrategyPlan r = row(strategy, std::to_string(n), n, c.batch / n);
  // loom's ZeRO-2 keeps the parameters' whole gradients until a bucket's
  // reduce-scatter (one bucket: until backward ends), then the rank's shard:
  // ZeRO-1's state and the shard at the peak.
  r.memory = state_parts(c, strategy == "single" ? "ddp" : strategy == "zero2" ? "zero1" : strategy, n);
  if (strategy == "ddp" && n > 1) r.memory.buffers = c.parameter_bytes();  // the gradient buckets' flat tensors
  if (strategy == "zero2") r.memory.buffers = c.parameter_bytes() / n;
  if (strategy == "fsdp") {
    // modeled_bytes counts the gathered unit in parameters and gradients; show it apart.
    const int64_t unit = c.p.largest_part * c.p.element_size;
    r.memory.parameters -= unit;
    r.memory.gradients -= unit;
    r.memory.gathered = 2 * unit;
  }
  r.memory.activations = static_cast<int64_t>(c.activations(static_cast<double>(c.batch) / n));
  r.all_ranks_bytes = r.memory.total() * n;
  Profile profile;
  profile.stage_forward_s = {c.forward_s(c.batch)};
  profile.stage_backward_s = {c.backward_s(c.batch)};
  profile.parameter_bytes = static_cast<double>(c.parameter_bytes());
  ProjectionSettings s{.devices = n, .ddp_buckets = c.buckets(), .link = c.o.cluster.link_for(n)};
  const double total = project_step_seconds(strategy, profile, s);
  r.time.compute_s = (profile.forward_s() + profile.backward_s()) / n;
  r.time.comm_s = std::max(0.0, total - r.time.compute_s);
  return r;
}

// Activations of tensor parallelism over t ranks, with or without sequence parallelism.
double tensor_parallel_activations(const Context& c, double n, int t, bool sequence_parallel) {
  const double share = sequence_parallel ? 1.0 / t : (kReplicatedWithoutSp + (kBlockBytes - kReplicatedWithoutSp) / t) / kBlockBytes;
  return c.p.step_bytes.fixed / t + c.activation_scale * c.p.step_bytes.per_sample * n * share;
}

// A block's four collectives of activations a step (two forward, two
// backward: Megatron's f and g), over t ranks at n samples.
double tensor_parallel_comm(const Context& c, double n, int t, const Link& link) {
  const double bytes = n * c.p.tokens_per_sample * c.p.embed_dim * 4 * c.activation_scale;
  return 4.0 * c.p.attention_layers * ring_all_reduce_seconds(t, bytes, link);
}

MemoryParts tensor_parallel_state(const Context& c, int t) {
  const int64_t whole = c.p.parameters - c.p.shardable_parameters;  // norms and the like stay whole
  const int64_t numel = whole + c.p.shardable_parameters / t;
  MemoryParts m;
  m.parameters = m.gradients = numel * c.p.element_size;
  m.optimizer_state = numel * 4 * c.p.optimizer_state_tensors;
  return m;
}

// tp, tp-sp over t ranks, or hybrid-tp: d replicas (DDP) of t-rank tensor-parallel groups.
StrategyPlan tensor_parallel(const Context& c, const std::string& strategy, int d, int t) {
  const int n = d * t;
  StrategyPlan r = row(strategy, d == 1 ? std::to_string(t) : std::to_string(d) + "x" + std::to_string(t), n, c.batch / d);
  r.memory = tensor_parallel_state(c, t);
  const bool sp = strategy == "tp-sp";
  r.memory.activations = static_cast<int64_t>(tensor_parallel_activations(c, static_cast<double>(c.batch) / d, t, sp));
  r.all_ranks_bytes = r.memory.total() * n;
  r.time.compute_s = (c.forward_s(c.batch) + c.backward_s(c.batch)) / n;
  r.time.comm_s = tensor_parallel_comm(c, static_cast<double>(c.batch) / d, t, c.o.cluster.link_for(t));
  if (d > 1) {  // the replicas' all-reduce of their shard of the gradients, behind backward but its last bucket
    const double all_reduce = ring_all_reduce_seconds(d, static_cast<double>(r.memory.gradients), c.o.cluster.link_for(n));
    r.time.comm_s += std::max(all_reduce / c.buckets(), all_reduce - c.backward_s(c.batch) / n);
  }
  r.note = "tensor-parallel collectives counted as exposed";
  return r;
}

// Context parallelism over n ranks: each rank 1/n of every sequence; keys
// and values pass around the ring (n - 1 hops forward, twice that backward
// with their gradients), counted as not hidden behind attention.
StrategyPlan context_parallel(const Context& c, int n) {
  StrategyPlan r = row("cp", std::to_string(n), n, c.batch);
  r.memory = state_parts(c, "ddp", n);
  r.memory.buffers = c.parameter_bytes();  // the gradients' all-reduce buckets, as DDP's
  r.memory.activations = static_cast<int64_t>(c.p.step_bytes.fixed + c.activation_scale * c.p.step_bytes.per_sample * c.batch / n);
  r.all_ranks_bytes = r.memory.total() * n;
  r.time.compute_s = (c.forward_s(c.batch) + c.backward_s(c.batch)) / n;
  const Link& link = c.o.cluster.link_for(n);
  const double kv = 2.0 * c.batch * c.p.tokens_per_sample / n * c.p.embed_dim * 4 * c.activation_scale;
  const double hops = 3.0 * (n - 1) * c.p.attention_layers * link.seconds(kv);
  const double gradients = ring_all_reduce_seconds(n, static_cast<double>(c.parameter_bytes()), link);
  r.time.comm_s = hops + std::max(gradients / c.buckets(), gradients - c.backward_s(c.batch) / n);
  r.note = "key/value passes counted as exposed";
  return r;
}

// Where the stages begin: the parts cut so that the slowest stage is as fast
// as it can be, by the parts' measured times where the profile has them
// (as compare_parallel cuts), else by their forward FLOPs. Each part's cost
// is also its share of the step's compute.
std::vector<double> part_costs(const ModelProfile& p) {
  std::vector<double> seconds, flops;
  for (const auto& part : p.parts) {
    seconds.push_back(part.seconds);
    flops.push_back(part.forward_flops_per_sample);
  }
  const bool timed = std::all_of(seconds.begin(), seconds.end(), [](double s) { return s > 0; });
  return timed ? seconds : flops;
}

// A pipeline stage's memory: the parts begin..end of the profile, with
// `in_flight` micro-batches of `micro` samples between their forward and
// backward. A stage after the first keeps each micro-batch's received input
// until its backward reads the input's gradient (the whole model's profile
// counted that tensor on the part before the cut, and a first part that
// would free it, such as a ReLU, cannot). One micro-batch at a time runs its
// backward: as it reaches part i, what the parts after i saved is released,
// and part i's temporaries and gradients come on top. A send does not wait
// for its receiver, so the gradient a stage sent back for one micro-batch
// may still be held when it works on the next: one input more, up to m.
struct StageMemory {
  MemoryParts mem;
  int64_t pending_send = 0;  // that gradient, when there is room for it
};

StageMemory stage_memory(const Context& c, size_t begin, size_t end, double micro, int in_flight, int m) {
  const auto& parts = c.p.parts;
  MemoryParts mem;
  int64_t numel = 0;
  for (size_t i = begin; i < end; ++i) numel += parts[i].parameters;
  mem.parameters = mem.gradients = numel * c.p.element_size;
  mem.optimizer_state = numel * 4 * c.p.optimizer_state_tensors;
  const bool received = begin > 0;
  const double input = received ? parts[begin - 1].output_bytes_per_sample : 0;
  double held = received ? parts[begin].input_freed_bytes_per_sample : 0;  // a micro-batch's, per sample
  double backward_peak = 0;
  for (size_t i = begin; i < end; ++i) {
    held += parts[i].kept_bytes_per_sample;
    const StepMemory& temporaries = parts[i].backward_bytes;
    backward_peak = std::max(backward_peak, temporaries.fixed + c.activation_scale * (std::max(0.0, held) +
                                                                                     temporaries.per_sample) * micro);
  }
  mem.activations =
      static_cast<int64_t>(c.activation_scale * std::max(0.0, held) * micro * (in_flight - 1) + backward_peak);
  const int64_t one_input = static_cast<int64_t>(c.activation_scale * input * micro);
  const int64_t pending_send = in_flight < m ? one_input : 0;
  mem.buffers = one_input * in_flight + pending_send;
  return {mem, pending_send};
}

// gpipe, 1f1b (stages = n), or hybrid: d replicas of a 1F1B pipeline of `stages`.
StrategyPlan pipeline(const Context& c, const std::string& strategy, int d, int stages) {
  const int n = d * stages, m = c.o.micro_batches;
  const double per_pipeline = static_cast<double>(c.batch) / d, micro = per_pipeline / m;
  StrategyPlan r = row(strategy, d == 1 ? std::to_string(stages) : std::to_string(d) + "x" + std::to_string(stages), n,
                       static_cast<int64_t>(micro));
  const std::vector<double> costs = part_costs(c.p);
  const double all_costs = std::accumulate(costs.begin(), costs.end(), 0.0);
  std::vector<size_t> first{0};
  const bool given = static_cast<int>(c.o.stage_boundaries.size()) == stages - 1;
  for (int b : given ? c.o.stage_boundaries : balanced_boundaries(costs, stages)) first.push_back(static_cast<size_t>(b));
  Profile profile;
  profile.parameter_bytes = static_cast<double>(c.parameter_bytes());
  for (int s = 0; s < stages; ++s) {
    const size_t begin = first[s], end = s + 1 < stages ? first[s + 1] : c.p.parts.size();
    double cost = 0;
    for (size_t i = begin; i < end; ++i) cost += costs[i];
    const double share = all_costs > 0 ? cost / all_costs : 1.0 / stages;
    profile.stage_forward_s.push_back(c.forward_s(c.batch) * share);
    profile.stage_backward_s.push_back(c.backward_s(c.batch) * share);
    if (s + 1 < stages) profile.boundary_bytes.push_back(c.p.parts[end - 1].output_bytes_per_sample * c.batch);
    // GPipe keeps every micro-batch's activations until its backwards; 1F1B at most stages - s.
    const int in_flight = strategy == "gpipe" ? m : std::min(m, stages - s);
    const auto [mem, pending_send] = stage_memory(c, begin, end, micro, in_flight, m);
    r.all_ranks_bytes += mem.total() * d;
    if (mem.total() > r.memory.total()) {
      r.memory = mem;
      r.pending_send_bytes = pending_send;
    }
  }
  ProjectionSettings settings{.devices = stages, .micro_batches = m, .mesh_data = d, .link = c.o.cluster.link_for(n)};
  const std::string projected = d == 1 ? strategy : "hybrid";
  const double total = project_step_seconds(projected, profile, settings);
  settings.link = {1e30, 0};
  const double without_links = project_step_seconds(projected, profile, settings);
  r.time.compute_s = (profile.forward_s() + profile.backward_s()) / n;
  r.time.bubble_s = std::max(0.0, without_links - r.time.compute_s);
  r.time.comm_s = std::max(0.0, total - without_links);
  return r;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", bytes / 1048576.0);
  return text;
}

}  // namespace

const StrategyPlan* PlanReport::best() const {
  for (const StrategyPlan& r : rows)
    if (r.fits && r.ranks == options.cluster.devices()) return &r;
  return nullptr;
}

const StrategyPlan* PlanReport::find(const std::string& strategy) const {
  for (const StrategyPlan& r : rows)
    if (r.strategy == strategy) return &r;
  return nullptr;
}

PlanReport plan(const nn::Module& model, const SampleBatch& sample, const PlanOptions& options) {
  return plan(profile_model(model, sample, {.optimizer = options.optimizer}), options);
}

PlanReport plan(const ModelProfile& profile, const PlanOptions& options) {
  PlanReport result{profile, options};
  const Cluster& cluster = options.cluster;
  const int n = cluster.devices();
  const int64_t batch = options.global_batch;
  LOOM_CHECK(batch >= 1, "planner: the global batch must be at least 1, got ", batch);
  LOOM_CHECK(batch % n == 0, "planner: a global batch of ", batch, " does not split over ", n, " ranks");
  for (const std::string& s : options.strategies)
    LOOM_CHECK(std::find(std::begin(kStrategies), std::end(kStrategies), s) != std::end(kStrategies),
               "planner: unknown strategy '", s, "'");
  const double peak = cluster.device.peak_flops(options.precision);
  double efficiency = options.compute_efficiency;
  if (efficiency <= 0) {
    // A CPU: the share of the GEMM rate at this process's threads that the
    // measured step reached (the ranks' peaks add up to the whole machine's).
    const double cores = std::max(1u, std::thread::hardware_concurrency());
    const double at_threads = peak * n * std::min<double>(omp_get_max_threads(), cores) / cores;
    efficiency = cluster.device.kind == "cpu" && profile.step_seconds_per_sample > 0
                     ? std::min(1.0, profile.flops_per_sample / profile.step_seconds_per_sample / at_threads)
                     : 0.5;
  }
  result.efficiency = efficiency;
  const bool narrow = options.precision != "fp32" && options.precision != "tf32";
  const Context c{profile, options, batch, peak * efficiency, narrow ? 0.5 : 1.0};

  auto wanted = [&](const std::string& name) {
    return options.strategies.empty() ||
           std::find(options.strategies.begin(), options.strategies.end(), name) != options.strategies.end();
  };
  std::vector<StrategyPlan>& rows = result.rows;
  if (wanted("single")) rows.push_back(data_parallel(c, "single", 1));
  if (n > 1) {
    for (const char* s : {"ddp", "zero1", "zero2", "fsdp"})
      if (wanted(s)) rows.push_back(data_parallel(c, s, n));
    const bool transformer = profile.attention_layers > 0 && profile.heads > 0;
    if (transformer && profile.heads % n == 0 && n <= cluster.devices_per_node) {
      if (wanted("tp")) rows.push_back(tensor_parallel(c, "tp", 1, n));
      if (wanted("tp-sp") && profile.tokens_per_sample % n == 0) rows.push_back(tensor_parallel(c, "tp-sp", 1, n));
    }
    if (transformer && wanted("cp") && profile.tokens_per_sample % (2 * n) == 0) rows.push_back(context_parallel(c, n));
    const int parts = static_cast<int>(profile.parts.size());
    if (parts >= n && batch % options.micro_batches == 0)
      for (const char* s : {"gpipe", "1f1b"})
        if (wanted(s)) rows.push_back(pipeline(c, s, 1, n));
    // Hybrids: every split of the ranks into d x k with both above 1.
    for (int d = 2; d < n; ++d) {
      if (n % d != 0) continue;
      const int k = n / d;
      if (wanted("hybrid") && k <= parts && batch % (d * options.micro_batches) == 0)
        rows.push_back(pipeline(c, "hybrid", d, k));
      if (wanted("hybrid-tp") && transformer && profile.heads % k == 0 && k <= cluster.devices_per_node && batch % d == 0)
        rows.push_back(tensor_parallel(c, "hybrid-tp", d, k));
    }
  }
  if (!options.stage_boundaries.empty()) {
    LOOM_CHECK(static_cast<int>(options.stage_boundaries.size()) == n - 1, "planner: ", options.stage_boundaries.size(),
               " stage boundaries for ", n, " stages; give ", n - 1);
    int previous = 0;
    for (int b : options.stage_boundaries) {
      LOOM_CHECK(b > previous && b < static_cast<int>(profile.parts.size()), "planner: stage boundary ", b,
                 " is not after ", previous, " and before the model's ", profile.parts.size(), " children");
      previous = b;
    }
  }
  const double usable = kUsableShare * static_cast<double>(cluster.device.memory_bytes);
  for (StrategyPlan& r : rows) {
    r.fits = static_cast<double>(r.memory.total()) <= usable;
    r.mfu = profile.flops_per_sample * batch / (r.time.total() * r.ranks * peak);
  }
  // The single-device row, a reference, goes last.
  std::stable_sort(rows.begin(), rows.end(), [](const StrategyPlan& a, const StrategyPlan& b) {
    if ((a.strategy == "single") != (b.strategy == "single")) return b.strategy == "single";
    if (a.fits != b.fits) return a.fits;
    return a.time.total() < b.time.total();
  });
  return result;
}

std::string PlanReport::table() const {
  std::ostringstream out;
  char line[320];
  std::snprintf(line, sizeof line,
                "plan: %lld parameters, global batch %lld, %s, %s; %s; efficiency %.2f of the peak\n",
                static_cast<long long>(profile.parameters), static_cast<long long>(options.global_batch),
                options.precision.c_str(), options.optimizer.c_str(), options.cluster.describe().c_str(), efficiency);
  out << line;
  std::snprintf(line, sizeof line, "%-10s %6s %6s %9s %9s %9s %9s %9s %9s %9s %5s %9s %9s %9s %9s %6s\n", "strategy",
                "mesh", "batch", "params", "grads", "optim", "activ.", "buffers", "gathered", "total MiB", "fits",
                "step ms", "compute", "comm", "bubble", "MFU");
  out << line;
  for (const StrategyPlan& r : rows) {
    std::snprintf(line, sizeof line, "%-10s %6s %6lld %9s %9s %9s %9s %9s %9s %9s %5s %9.3f %9.3f %9.3f %9.3f %5.1f%%%s%s\n",
                  r.strategy.c_str(), r.mesh.c_str(), static_cast<long long>(r.batch_per_rank),
                  mib(r.memory.parameters).c_str(), mib(r.memory.gradients).c_str(),
                  mib(r.memory.optimizer_state).c_str(), mib(r.memory.activations).c_str(),
                  mib(r.memory.buffers).c_str(), mib(r.memory.gathered).c_str(), mib(r.memory.total()).c_str(),
                  r.fits ? "yes" : "NO", 1e3 * r.time.total(), 1e3 * r.time.compute_s, 1e3 * r.time.comm_s,
                  1e3 * r.time.bubble_s, 100 * r.mfu, r.note.empty() ? "" : "  ", r.note.c_str());
    out << line;
  }
  const StrategyPlan* b = best();
  if (b != nullptr)
    out << "best: " << b->strategy << " (mesh " << b->mesh << "), " << mib(b->memory.total()) << " MiB a rank, "
        << std::to_string(1e3 * b->time.total()).substr(0, 8) << " ms a step\n";
  else
    out << "best: none fits; a smaller batch, more devices or a sharded optimizer state may\n";
  return out.str();
}

std::string PlanReport::json_lines() const {
  std::ostringstream out;
  char line[640];
  std::snprintf(line, sizeof line,
                "{\"bench\": \"plan_profile\", \"parameters\": %lld, \"state_bytes\": %lld, \"step_fixed_bytes\": %.0f, "
                "\"step_bytes_per_sample\": %.1f, \"flops_per_sample\": %.0f, \"forward_flops_per_sample\": %.0f, "
                "\"largest_unit\": %lld, \"efficiency\": %.4f}\n",
                static_cast<long long>(profile.parameters), static_cast<long long>(profile.state_bytes),
                profile.step_bytes.fixed, profile.step_bytes.per_sample, profile.flops_per_sample,
                profile.forward_flops_per_sample, static_cast<long long>(profile.largest_part), efficiency);
  out << line;
  for (const ModelProfile::Part& part : profile.parts) {
    std::snprintf(line, sizeof line,
                  "{\"bench\": \"plan_part\", \"name\": \"%s\", \"parameters\": %lld, \"kept_bytes_per_sample\": %.1f, "
                  "\"input_freed_bytes_per_sample\": %.1f, \"backward_fixed_bytes\": %.0f, "
                  "\"backward_bytes_per_sample\": %.1f, \"output_bytes_per_sample\": %.1f, "
                  "\"forward_flops_per_sample\": %.0f}\n",
                  part.name.c_str(), static_cast<long long>(part.parameters), part.kept_bytes_per_sample,
                  part.input_freed_bytes_per_sample, part.backward_bytes.fixed, part.backward_bytes.per_sample,
                  part.output_bytes_per_sample, part.forward_flops_per_sample);
    out << line;
  }
  for (const StrategyPlan& r : rows) {
    std::snprintf(line, sizeof line,
                  "{\"bench\": \"plan\", \"strategy\": \"%s\", \"mesh\": \"%s\", \"ranks\": %d, \"batch_per_rank\": %lld, "
                  "\"parameters_bytes\": %lld, \"gradients_bytes\": %lld, \"optimizer_bytes\": %lld, "
                  "\"activations_bytes\": %lld, \"buffers_bytes\": %lld, \"gathered_bytes\": %lld, \"peak_bytes\": %lld, "
                  "\"pending_send_bytes\": %lld, \"all_ranks_bytes\": %lld, \"fits\": %s, \"step_ms\": %.4f, "
                  "\"compute_ms\": %.4f, \"comm_ms\": %.4f, \"bubble_ms\": %.4f, \"mfu\": %.4f}\n",
                  r.strategy.c_str(), r.mesh.c_str(), r.ranks, static_cast<long long>(r.batch_per_rank),
                  static_cast<long long>(r.memory.parameters), static_cast<long long>(r.memory.gradients),
                  static_cast<long long>(r.memory.optimizer_state), static_cast<long long>(r.memory.activations),
                  static_cast<long long>(r.memory.buffers), static_cast<long long>(r.memory.gathered),
                  static_cast<long long>(r.memory.total()), static_cast<long long>(r.pending_send_bytes),
                  static_cast<long long>(r.all_ranks_bytes),
                  r.fits ? "true" : "false", 1e3 * r.time.total(), 1e3 * r.time.compute_s, 1e3 * r.time.comm_s,
                  1e3 * r.time.bubble_s, r.mfu);
    out << line;
  }
  return out.str();
}

}  // namespace loom::parallel
