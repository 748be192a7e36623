// The planner: before a launch, for a model, a global batch and a cluster,
// what every strategy and mesh that can run would need of each rank's
// memory, whether that fits, how long a step would take and its MFU.
//
//   parallel::PlanOptions options;
//   options.global_batch = 256;
//   options.cluster = parallel::parse_cluster("2x8xh100-sxm");
//   options.precision = "bf16";
//   parallel::PlanReport p = parallel::plan(*model, {x, y}, options);   // x, y: a small sample batch
//   std::cout << p.table();                                       // every row, the best named
//   p.best()->strategy;                                           // "fsdp", ...
//
// Where the numbers come from:
// - the model is measured once on the sample's device (model_profile.h):
//   its state, a step's activations and temporaries as a line in the batch,
//   its FLOPs counted, and per child of a Sequential what a pipeline stage
//   would hold;
// - each rank's parameters, gradients and optimizer state follow the ZeRO
//   accounting (parallel/sharding/memory_model.h); activations are the
//   measured line at the rank's batch, cut as each strategy cuts them
//   (tensor parallelism after Korthikanti et al. 2022: 10 of a block's 34
//   activation bytes per token and hidden unit stay whole on every rank
//   without sequence parallelism); a pipeline stage holds its children's
//   activations for the micro-batches in flight (GPipe all m, 1F1B
//   stages - s); FSDP also holds its largest unit gathered with its gradient;
// - time is FLOPs over the device's peak for the precision times an
//   efficiency (measured on this machine's CPU; 0.5 on a GPU unless given),
//   with communication and bubbles from the alpha-beta model (step_time.h)
//   over the cluster's links. Tensor and context parallelism's collectives
//   carry activations and are counted as not hidden (an upper bound).
// The time is a model, not a measurement: bench/plan prints it beside
// compare_parallel's where both run (docs/planner.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/planner/cluster.h"
#include "parallel/planner/model_profile.h"

namespace loom::parallel {

struct PlanOptions {
  int64_t global_batch = 0;          // samples a step over all ranks; 0: the sample's
  std::string precision = "fp32";    // fp32, tf32, bf16, fp16, fp8: the peak's column; 16 and 8 bits halve activations
  std::string optimizer = "adamw";   // adamw, sgd, sgd-momentum
  Cluster cluster;                   // parse_cluster("8xh100-sxm"); default: one device of this machine's CPU
  int micro_batches = 8;             // pipelines
  double compute_efficiency = 0;     // share of the peak a step reaches; 0: measured on a CPU, 0.5 on a GPU
  int64_t ddp_bucket_bytes = 25LL << 20;
  std::vector<std::string> strategies;  // only these (by name); empty: every one that applies
  // Pipelines: the children each stage after the first begins at
  // (split_sequential's boundaries), one list for `cluster.devices()`
  // stages; empty: cut where the children's measured times balance.
  std::vector<int> stage_boundaries;
};

struct MemoryParts {
  int64_t parameters = 0, gradients = 0, optimizer_state = 0;
  int64_t activations = 0;  // at the step's peak, with the step's temporaries
  int64_t buffers = 0;      // communication buffers and received activations
  int64_t gathered = 0;     // FSDP: the largest unit's parameters and gradients, gathered
  int64_t total() const { return parameters + gradients + optimizer_state + activations + buffers + gathered; }
};

struct StepTime {
  double compute_s = 0, comm_s = 0, bubble_s = 0;  // comm: exposed, not hidden behind compute
  double total() const { return compute_s + comm_s + bubble_s; }
};

struct StrategyPlan {
  std::string strategy;  // ddp, zero1, zero2, fsdp, tp, tp-sp, cp, gpipe, 1f1b, hybrid, hybrid-tp, single
  std::string mesh;      // "8", "2x4" (data x pipeline or data x tensor)
  int ranks = 1;
  int64_t batch_per_rank = 0;  // samples a rank's forward sees at once (a micro-batch in pipelines)
  MemoryParts memory;          // the rank that needs the most
  int64_t all_ranks_bytes = 0; // every rank's peak added
  // Of that rank's memory.total(), what it holds at its peak only when a
  // peer is late: a pipeline's gradient sent back and not yet received.
  int64_t pending_send_bytes = 0;
  bool fits = false;           // memory.total() within kUsableShare of the device's memory
  StepTime time;
  double mfu = 0;
  std::string note;            // what limits it, or why a number is a bound
};

struct PlanReport {
  ModelProfile profile;
  PlanOptions options;
  double efficiency = 0;            // the one used
  std::vector<StrategyPlan> rows{}; // fitting rows first, fastest first
  const StrategyPlan* best() const; // the fastest that fits; nullptr when none does
  const StrategyPlan* find(const std::string& strategy) const;
  std::string table() const;        // the rows as text, the best named
  std::string json_lines() const;   // one JSON object a row
};

// Measures `model` on `sample` (a few samples, on the device to measure on)
// and plans for options.cluster. Throws loom::Error for a batch that does not
// split over the ranks, an unknown strategy name or precision.
PlanReport plan(const nn::Module& model, const SampleBatch& sample, const PlanOptions& options);

// The same from a profile already measured.
PlanReport plan(const ModelProfile& profile, const PlanOptions& options);

}  // namespace loom::parallel
