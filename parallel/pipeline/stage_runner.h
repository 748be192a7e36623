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
#include "parallel/pipeline/simulator.h"

namespace loom::parallel {

// A loss that is a mean over its batch, so that micro-batch losses weighted
// by their share of the batch add up to the whole batch's loss.
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// What a stage measured in its last step.
struct StageStats {
  double busy_seconds = 0;   // running forward and backward passes
  double idle_fraction = 0;  // 1 - busy / step time
  int peak_in_flight = 0;    // most micro-batches whose activations it held at once (F to B, or to W)
  int64_t bytes_sent = 0;    // activations and gradients passed to neighbours
  // When each pass ran, in seconds from the step's start as the host saw it
  // (on a GPU: from its first to its last queued kernel, not the kernels' time).
  std::vector<PassTime> passes;
};

// How a stage exchanges tensors with the stages before and after it. Each
// move names the stage's own chunk; the transport finds the neighbour: with
// p stages, chunk c of stage s is part c p + s of the model, so its input
// comes from part c p + s - 1 (stage s - 1, or stage p - 1's chunk c - 1)
// and its output goes to part c p + s + 1 (in ZB-V's V, place_part says
// where). The receives block until the tensor is there (or throw if it never
// will be) and show in a trace as the stage's idle time; the sends do not
// wait for the receiver and count their bytes when they leave the stage (the
// V's turn stays on its stage). A transport (mailboxes in one process,
// send/recv between ranks) implements the four moves.
class StageLinks {
 public:
  explicit StageLinks(int lane) : lane_(lane) {}
  virtual ~StageLinks() = default;
  // The previous part's output for this micro-batch.
  Tensor receive_activation(int chunk, int micro_batch);
  void send_activation(int chunk, int micro_batch, const Tensor& activation);
  // The gradient of the loss with respect to this chunk's `output`.
  Tensor receive_gradient(int chunk, int micro_batch, const Tensor& output);
  void send_gradient(int chunk, int micro_batch, const Tensor& gradient);
  int64_t bytes_sent() const { return bytes_sent_; }

 protected:
  // The puts return whether the tensor left the stage.
  virtual Tensor take_activation(int chunk, int micro_batch) = 0;
  virtual bool put_activation(int chunk, int micro_batch, const Tensor& activation) = 0;
  virtual Tensor take_gradient(int chunk, int micro_batch, const Tensor& output) = 0;
  virtual bool put_gradient(int chunk, int micro_batch, const Tensor& gradient) = 0;

 private:
  int lane_;
  int64_t bytes_sent_ = 0;
};

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
