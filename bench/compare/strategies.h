// The strategies compare_parallel runs, each on a fresh copy of the same
// model and batch, and what it measures of each.
#pragma once

#include <string>
#include <vector>

#include "bench/compare/projection.h"
#include "bench/workloads.h"

namespace loom::bench {

struct CompareConfig {
  Device device = Device::cpu();
  int devices = 2;        // replicas, ranks or pipeline stages
  int micro_batches = 8;  // pipelines
  int steps = 10, warmup = 2;
  std::string trace_dir;  // one Chrome trace per strategy; empty: none
};

// One strategy's step, averaged over the timed steps.
struct Measurement {
  std::string strategy;
  std::string skipped;  // why it did not run; empty if it ran
  double step_s = 0;
  double compute_s = 0, comm_s = 0, idle_s = 0;  // per device, adding up to step_s
  int64_t peak_bytes = 0;                         // peak allocated on the device(s)
  double comm_bytes = 0;                          // moved between devices per step
  bool comm_bytes_measured = false;               // false: computed from tensor sizes
  int ddp_buckets = 0;
};

// Where the model is cut into pipeline stages, and the single-device profile
// the projection starts from. Each child of a Sequential is timed once
// (forward and backward on the whole batch); the cuts give the stages about
// equal time. A model that is not a Sequential of at least `stages` children
// gets no boundaries (then only single, dp and ddp run) and one stage.
struct StagePlan {
  std::vector<int> boundaries;
  Profile profile;
};
StagePlan plan_stages(const Workload& w, int stages);

// strategy: single, dp, ddp, layer_split, gpipe, 1f1b.
Measurement run_strategy(const std::string& strategy, const Workload& w, const StagePlan& plan,
                         const CompareConfig& config);

}  // namespace loom::bench
