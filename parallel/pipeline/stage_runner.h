// One pipeline stage running its part of a schedule: the forward and
// backward passes of its micro-batches through its model chunks (one, or
// several in an interleaved schedule), in the schedule's order, with
// activations and gradients passed to its neighbours through StageLinks.
// The single-process Pipeline links its stages through mailboxes; the
// multi-process DistributedPipeline through a ProcessGroup's send/recv. Both
// run the same code below, so they train identically.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_links.h"
#include "parallel/pipeline/stage_stats.h"

namespace loom::parallel {

// A loss that is a mean over its batch, so that micro-batch losses weighted
// by their share of the batch add up to the whole batch's loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// What only the first stage has (for its chunk 0): the micro-batches of the inputs.
struct FirstStage {
  const TensorList& micro_batches;
};

// What only the last stage has (for its last chunk): the targets, the loss,
// and where each micro-batch's loss (weighted by its share of the batch) goes.
struct LastStage {
  const TensorList& targets;
  const LossFn& loss;
  int64_t batch;  // samples in the whole batch
  std::vector<Tensor>& losses;
};

// What one stage needs to run its actions.
struct StageTask {
  std::vector<std::reference_wrapper<nn::Module>> chunks;  // one, or several interleaved
  Device device;
  std::optional<FirstStage> first{};  // set on the first stage only
  std::optional<LastStage> last{};    // set on the last stage only
  int lane = 0;                     // trace::lane() of its spans, looked up once by the owner
  std::chrono::steady_clock::time_point step_start = std::chrono::steady_clock::now();  // for stats.passes
  // Called before each pass that accumulates the weights' gradients (a B, or
  // a W) of a chunk, told whether it is that chunk's last of the step (a
  // hybrid pipeline averages the chunk's gradients over its data group then).
  std::function<void(int chunk, bool last_backward)> before_backward{};
};

// Splits a batch into m micro-batches along dim 0 whose sizes differ by at
// most one (as torch.tensor_split); `who` names the caller in the error for a
// batch smaller than m.
TensorList split_micro_batches(const Tensor& batch, int micro_batches, const char* who);

// The sum of the micro-batches' weighted losses: the batch loss.
Tensor sum_losses(const std::vector<Tensor>& losses);

// Runs `actions` (one stage's row of a schedule) and returns what it measured
// (idle_fraction is left to the caller, who knows the step's length).
StageStats run_stage(const std::vector<Action>& actions, const StageTask& task, StageLinks& links);

}  // namespace loom::parallel
