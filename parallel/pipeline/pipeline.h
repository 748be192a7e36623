// Pipeline parallelism in one process: a model split into p stages, one per
// device, each run by its own worker thread; a batch split into m
// micro-batches that flow through the stages according to a schedule
// (GPipe, 1F1B, interleaved 1F1B or zero-bubble ZB-H1, see schedule.h).
// Activations move forward and gradients backward between stages through
// mailboxes; gradients
// accumulate over the micro-batches, so one train_step equals one step on
// the whole batch.
//
// Interleaved, the model is split into p * v parts for p devices: part i
// runs on devices[i % p] as that stage's chunk i / p. ZB-V splits it into
// 2p parts placed in a V: parts s and 2p - 1 - s on devices[s].
//
//   parallel::Pipeline pipe(parallel::split_sequential(model, {2, 5}), {dev0, dev1, dev2},
//                           {.micro_batches = 8, .schedule = parallel::ScheduleKind::OneFOneB});
//   opt.zero_grad();
//   Tensor loss = pipe.train_step(x, y, [](const Tensor& out, const Tensor& t) {
//     return nn::functional::cross_entropy(out, t);
//   });
//   opt.step();                                // opt over pipe.parameters()
//
//   parallel::Pipeline interleaved(parallel::split_sequential(model, {1, 3, 5}), {dev0, dev1},
//                                  {.micro_batches = 8, .schedule = parallel::ScheduleKind::Interleaved1F1B,
//                                   .chunks = 2});   // parts 0, 2 on dev0; 1, 3 on dev1
//   parallel::Pipeline v(parallel::split_sequential(model, {1, 3, 5}), {dev0, dev1},
//                        {.micro_batches = 8, .schedule = parallel::ScheduleKind::ZeroBubbleV,
//                         .chunks = 2});   // parts 0, 3 on dev0; 1, 2 on dev1
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/layers/container.h"
#include "parallel/pipeline/mailbox.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_runner.h"
#include "parallel/worker_pool.h"
#include "tensor/device_queue.h"

namespace loom::parallel {

struct PipelineOptions {
  int micro_batches = 4;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  int chunks = 1;  // model chunks per stage: any for Interleaved1F1B, 2 for ZeroBubbleV, else 1
  // ZeroBubbleH2 and ZeroBubbleV only (built_for_pass_times): each part's
  // pass times (p * chunks, in the model's order; measured: balance.h's
  // part_pass_times), which the schedule is built for; empty: equal passes.
  // Every rank must be given the same.
  std::vector<PassTimes> part_times{};
};

// What the last train_step measured.
struct PipelineStats {
  double step_seconds = 0;
  double bubble_fraction = 0;  // the stages' mean idle fraction
  std::vector<StageStats> stages;
};

// The last step as a chart `width` columns wide: each stage's passes where
// they ran, idle time as dots (simulator.h's timeline, on measured times).
std::string timeline(const PipelineStats& stats, int width = 100);

// Cuts a Sequential before the children at `boundaries` (increasing indices):
// {2, 5} makes children [0, 2), [2, 5), [5, end). The parts share the
// children (no copies).
std::vector<nn::ModulePtr> split_sequential(const nn::Sequential& model, const std::vector<int>& boundaries);

// Stage `stage`'s chunks among `parts` (p * v of them, in the model's order,
// p = `stages`), as `placement` puts them (schedule.h): in a loop, parts
// stage, p + stage, ... (interleaved); in a V, parts stage and 2p - 1 - stage
// (ZB-V). With one chunk a stage, {parts[stage]}.
std::vector<nn::ModulePtr> stage_chunks(const std::vector<nn::ModulePtr>& parts, int stage, int stages,
                                        Placement placement = Placement::Loop);

// The parameters of `modules`, in order.
TensorList parameters_of(const std::vector<nn::ModulePtr>& modules);

class Pipeline {
 public:
  // Part i of `parts` (p * chunks of them, in the model's order) is moved to
  // its stage's device (devices[i % p], p = devices.size(), or in ZB-V's V);
  // with one chunk, stage s is part s.
  Pipeline(std::vector<nn::ModulePtr> parts, std::vector<Device> devices, PipelineOptions options = {});

  // Forward and backward of the batch (x, y) in micro-batches; returns the
  // batch loss (a 0-d tensor on the last part's device: stage 0's in ZB-V).
  Tensor train_step(const Tensor& x, const Tensor& y, const LossFn& loss);
  // Micro-batched forward without gradients; the output on the last device.
  Tensor forward(const Tensor& x);

  TensorList parameters() const;
  const std::vector<nn::ModulePtr>& parts() const { return parts_; }
  const PipelineSchedule& schedule() const { return schedule_; }
  const PipelineStats& stats() const { return stats_; }

 private:
  int stage_of_part(size_t i) const {
    return place_part(static_cast<int>(i), static_cast<int>(devices_.size()), options_.chunks,
                      placement_of(options_.schedule)).stage;
  }
  const Device& device_of_part(size_t i) const { return devices_[stage_of_part(i)]; }

  std::vector<nn::ModulePtr> parts_;
  std::vector<Device> devices_;
  std::vector<int> lanes_;  // each stage's trace lane
  PipelineOptions options_;
  PipelineSchedule schedule_;
  std::vector<Mailbox> activations_;  // [i]: from part i to i + 1
  std::vector<Mailbox> gradients_;    // [i]: from part i + 1 to i
  std::vector<DeviceQueue> queues_;  // each stage's own queue on its device
  std::unique_ptr<WorkerPool> workers_;
  PipelineStats stats_;
};

}  // namespace loom::parallel
