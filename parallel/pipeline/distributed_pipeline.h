// Pipeline parallelism over processes: rank r of a ProcessGroup runs stage r
// of the model (mpirun -np p for p stages). Activations go from rank r to
// r + 1 and gradients back from r + 1 to r with send/recv; the schedule
// (GPipe, 1F1B, interleaved 1F1B, ZB-H1 or ZB-V) and the stage code are those of the
// single-process Pipeline (stage_runner.h), so one train_step equals one step
// on the whole batch.
//
//   auto group = parallel::init(argc, argv);
//   auto stages = parallel::split_sequential(model, {3, 6});     // same model and seed on every rank
//   parallel::DistributedPipeline pipe(stages[group->rank()], group, {.micro_batches = 8});
//   optim::AdamW opt(pipe.parameters());                          // this rank's stage only
//   opt.zero_grad();
//   Tensor loss = pipe.train_step(x, y, loss_fn);  // x read on rank 0, y on pipe.loss_rank()
//   opt.step();                                    // loss defined on the loss rank only
//
// Interleaved, the model is cut into p * v parts and rank r runs parts r,
// p + r, ..., as its chunks; the last rank's activations go on to rank 0's
// next chunk:
//
//   auto parts = parallel::split_sequential(model, {1, 3, 5});   // 4 parts, mpirun -np 2
//   DistributedPipeline pipe(parallel::stage_chunks(parts, r, 2), group,
//                            {.micro_batches = 8, .schedule = ScheduleKind::Interleaved1F1B, .chunks = 2});
//
// ZB-V places its two chunks in a V (schedule.h): rank r runs parts r and
// 2p - 1 - r, the last rank turns each micro-batch around in memory, and
// rank 0, which has the last part, computes the loss:
//
//   DistributedPipeline pipe(parallel::stage_chunks(parts, r, 2, Placement::V), group,
//                            {.micro_batches = 8, .schedule = ScheduleKind::ZeroBubbleV, .chunks = 2});
//
// Hybrid data x pipeline: with a data group as well, several pipelines train
// side by side, each on its own share of the batch, and each stage's
// gradients are averaged over the ranks that run the same stage, as DDP's
// are (reducer.h): in buckets, while the stage's last micro-batch runs its
// backward; the earlier ones accumulate locally. A DeviceMesh hands out both:
//
//   DeviceMesh mesh(world, {{"data", 2}, {"pipeline", 2}});   // mpirun -np 4
//   DistributedPipeline pipe(stages[mesh.coordinate("pipeline")], mesh.group("pipeline"),
//                            mesh.group("data"), {.micro_batches = 4});
//
// Each activation travels as two messages: a small header (dtype and shape,
// which the receiver cannot know in advance) and the tensor. Gradients need
// no header: they have the shape of the activation their receiver sent.
// Like every ProcessGroup operation, a receive whose peer has died or failed
// ends with the group's timeout error naming the rank and the operation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/comm/process_group.h"
#include "parallel/pipeline/stage_sharing.h"
#include "parallel/ddp/reducer.h"
#include "parallel/pipeline/pipeline.h"

namespace loom::parallel {

class DistributedPipeline {
 public:
  // This rank's `stage` (its part of the model, as split_sequential cuts it)
  // moves to `device`; the group's size is the number of stages.
  DistributedPipeline(nn::ModulePtr stage, std::shared_ptr<ProcessGroup> group, PipelineOptions options = {},
                      Device device = Device::cpu());
  // Interleaved or ZB-V: this rank's `chunks` (options.chunks of them,
  // stage_chunks(parts, rank, p, placement_of(options.schedule))) on `device`.
  DistributedPipeline(std::vector<nn::ModulePtr> chunks, std::shared_ptr<ProcessGroup> group,
                      PipelineOptions options, Device device = Device::cpu());
  // Hybrid: `group` is this rank's pipeline, `data_group` the ranks that run
  // the same stage; they start from the data group's rank 0's parameters.
  DistributedPipeline(nn::ModulePtr stage, std::shared_ptr<ProcessGroup> group,
                      std::shared_ptr<ProcessGroup> data_group, PipelineOptions options = {},
                      Device device = Device::cpu());
  // Hybrid with several chunks a stage (interleaved, ZB-V): each chunk's
  // gradients are averaged as its last B or W accumulates them.
  DistributedPipeline(std::vector<nn::ModulePtr> chunks, std::shared_ptr<ProcessGroup> group,
                      std::shared_ptr<ProcessGroup> data_group, PipelineOptions options,
                      Device device = Device::cpu());

  // Forward and backward of the batch (x, y) in micro-batches. Rank 0 reads
  // x and the loss rank y; the others may pass undefined tensors. Returns the
  // batch loss on the loss rank, an undefined tensor on the others.
  Tensor train_step(const Tensor& x, const Tensor& y, const LossFn& loss);
  // Micro-batched forward without gradients (x read on rank 0); the output on
  // the loss rank, an undefined tensor on the others.
  Tensor forward(const Tensor& x);
  // The rank with the model's last part: the last rank, or rank 0 in ZB-V.
  int loss_rank() const {
    return place_part(stages_ * options_.chunks - 1, stages_, options_.chunks, placement_).stage;
  }

  TensorList parameters() const;  // of this rank's chunks
  const std::vector<nn::ModulePtr>& chunks() const { return chunks_; }
  // This rank's row of the schedule.
  const std::vector<Action>& actions() const { return schedule_[rank_]; }
  // What this rank measured in the last train_step; idle_fraction is against
  // its own step time (the pipeline's bubble: against the longest rank's).
  const StageStats& stats() const { return stats_; }
  double step_seconds() const { return step_seconds_; }
  // The last step drawn as schedule.h's timeline() draws one, `width`
  // columns wide: every rank's passes, each from its own start of the step
  // (the ranks start within the time a step's first message takes). A
  // collective: every rank calls it; rank 0 gets the chart, the others "".
  std::string timeline(int width = 100) const;

 private:
  std::vector<nn::ModulePtr> chunks_;
  std::shared_ptr<ProcessGroup> group_;
  // Hybrid: per chunk, what averages its gradients over the data group (none for a chunk without parameters).
  std::vector<std::shared_ptr<Reducer>> data_reducers_;
  PipelineOptions options_;
  Device device_;
  int rank_ = 0, stages_ = 1;
  Placement placement_ = Placement::Loop;
  int lane_ = 0;  // the trace lane of this stage's passes
  PipelineSchedule schedule_;
  StageStats stats_;
  double step_seconds_ = 0;
};

}  // namespace loom::parallel
