// The strategies compare_parallel runs, each on a fresh copy of the same
// model and batch, and what it measures of each.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/workloads.h"
#include "parallel/comm/process_group.h"
#include "parallel/planner/step_time.h"
#include "parallel/pipeline/schedule.h"

namespace loom::bench {

// Where the model is cut into pipeline stages, and the single-device profile
// the projection starts from. Each child of a Sequential is timed once
// (forward and backward on the whole batch); the cuts give the stages about
// equal time. A model that is not a Sequential of at least `stages` children
// gets no boundaries (then only single, dp and ddp run) and one stage.
struct StagePlan {
  std::vector<int> boundaries;
  std::vector<parallel::PassTimes> part_times;  // each stage's F, I and W (balance.h's part_pass_times)
  parallel::Profile profile;
};
struct CompareConfig {
  Device device = Device::cpu();
  int devices = 2;        // replicas, ranks or pipeline stages
  // The single-process strategies' devices when given as a list (--devices
  // cuda:0,cuda:1); empty: `devices` copies of `device`.
  std::vector<Device> device_list;
  int micro_batches = 8;  // pipelines
  int steps = 10, warmup = 2;
  std::string trace_dir;  // one Chrome trace per strategy (per rank under mpirun); empty: none
  // Under mpirun with more than one rank: the ranks (one device each). ddp
  // and the pipelines then run over them; dp and layer_split, which drive
  // every device from one process, are skipped.
  std::shared_ptr<parallel::ProcessGroup> group;
  // hybrid and hybrid-tp: the D x N mesh (--mesh DxN; 0 x 0 when not
  // given), and where hybrid's N stages are cut (plan_stages for N).
  int mesh_data = 0, mesh_pipeline = 0;
  std::vector<int> mesh_boundaries;
  // The pipelines' cuts: [v] is the model cut into v parts per stage
  // (plan_stages for that many; no boundaries when the model has too few
  // children), with each part's pass times, which the zb-h2 and zb-v
  // schedules are built for. [1] is the plan of one part a stage; [2] and
  // more are made only for the strategies that run several (interleaved, zb-v).
  std::map<int, StagePlan> chunk_plans;
};

// One strategy's step, averaged over the timed steps. On a GPU the split into
// compute, communication and idle comes from the GPU's own timeline (spans
// timed with CUDA events on each stream), not from when the host queued work.
struct Measurement {
  explicit Measurement(std::string name) : strategy(std::move(name)) {}
  std::string strategy;
  std::string skipped;  // why it did not run; empty if it ran
  double step_s = 0;
  double compute_s = 0, comm_s = 0, idle_s = 0;  // per device, adding up to step_s
  int64_t peak_bytes = 0;                         // peak allocated on the device(s)
  int64_t outside_bytes = 0;  // allocated before the strategy began (the workload's model and batch), in peak_bytes
  double comm_bytes = 0;                          // moved between devices per step
  bool comm_bytes_measured = false;               // false: computed from tensor sizes
  bool split_known = true;                        // false: compute_s is the whole step, comm unknown
  int ddp_buckets = 0;
  int64_t modeled_state_bytes = 0;  // ddp, zero1, zero2, fsdp: parameters + gradients + Adam per rank (memory_model.h)
  std::string timeline;  // pipelines: the last step drawn, one line per stage (simulator.h); else empty
};

// Where a pipeline of `stages` is cut (the children each stage after the
// first begins at): `given`, else where the children's measured times
// balance; with each stage's timed passes.
StagePlan plan_stages(const Workload& w, int stages, const std::vector<int>& given = {});

// strategy: single, dp, ddp, zero1, zero2, fsdp, layer_split, gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v,
// hybrid, tp; any of them with "_ckpt" appended runs on checkpointed(w).
// Under mpirun every rank calls it for the strategies that run over ranks
// (all ranks take part) and rank 0 alone for single.
// The workload with activation checkpointing: a Sequential in about
// sqrt(children) checkpointed segments, each block of a GPT checkpointed,
// any other model checkpointed whole.
Workload checkpointed(const Workload& w);

Measurement run_strategy(const std::string& strategy, const Workload& w, const StagePlan& plan,
                         const CompareConfig& config);

}  // namespace loom::bench
