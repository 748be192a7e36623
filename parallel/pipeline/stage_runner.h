// One pipeline stage running its part of a schedule: the forward and
// backward passes of its micro-batches, in the schedule's order, with
// activations and gradients passed to its neighbours through StageLinks.
// The single-process Pipeline links its stages through mailboxes; the
// multi-process DistributedPipeline through a ProcessGroup's send/recv. Both
// run the same code below, so they train identically.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/pipeline/schedule.h"

namespace loom::parallel {

// A loss that is a mean over its batch, so that micro-batch losses weighted
// by their share of the batch add up to the whole batch's loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// What a stage measured in its last step.
struct StageStats {
  double busy_seconds = 0;   // running forward and backward passes
  double idle_fraction = 0;  // 1 - busy / step time
  int peak_in_flight = 0;    // most micro-batches whose activations it held at once
  int64_t bytes_sent = 0;    // activations and gradients passed to neighbours
};

// How a stage exchanges tensors with the stages before and after it. The
// receives block until the tensor is there (or throw if it never will be);
// the sends do not wait for the receiver.
class StageLinks {
 public:
  virtual ~StageLinks() = default;
  // The previous stage's output for this micro-batch.
  virtual Tensor receive_activation(int micro_batch) = 0;
  virtual void send_activation(int micro_batch, const Tensor& activation) = 0;
  // The gradient of the loss with respect to this stage's `output`.
  virtual Tensor receive_gradient(int micro_batch, const Tensor& output) = 0;
  virtual void send_gradient(int micro_batch, const Tensor& gradient) = 0;
};

// What one stage needs to run its actions.
struct StageTask {
  nn::Module* module = nullptr;
  Device device;
  bool first = false, last = false;
  const TensorList* inputs = nullptr;   // first stage: the micro-batches
  const TensorList* targets = nullptr;  // last stage: their targets
  const LossFn* loss = nullptr;         // last stage
  int64_t batch = 0;                    // last stage: samples in the whole batch
  std::vector<Tensor>* losses = nullptr;  // last stage: each micro-batch's weighted loss
  int lane = 0;                          // trace::lane() of its spans, looked up once by the owner
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
