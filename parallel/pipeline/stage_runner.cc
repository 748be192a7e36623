#include "parallel/pipeline/stage_runner.h"

#include <algorithm>
#include <map>
#include <utility>

#include "autograd/engine.h"
#include "autograd/split_backward.h"
#include "parallel/trace.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {

TensorList split_micro_batches(const Tensor& batch, int micro_batches, const char* who) {
  LOOM_CHECK(batch.defined() && batch.dim() >= 1 && batch.size(0) >= micro_batches, who, ": a batch of ",
             batch.defined() && batch.dim() >= 1 ? batch.size(0) : 0, " cannot make ", micro_batches, " micro-batches");
  const int64_t n = batch.size(0);
  std::vector<int64_t> sizes(micro_batches, n / micro_batches);
  for (int64_t i = 0; i < n % micro_batches; ++i) ++sizes[i];
  return split(batch.detach(), sizes, 0);
}

Tensor sum_losses(const std::vector<Tensor>& losses) {
  Tensor total = losses.at(0);
  for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i];
  return total;
}

Tensor StageLinks::receive_activation(int chunk, int micro_batch) {
  trace::Span wait("wait activation", "idle", lane_);
  return take_activation(chunk, micro_batch);
}

void StageLinks::send_activation(int chunk, int micro_batch, const Tensor& activation) {
  bytes_sent_ += static_cast<int64_t>(activation.nbytes());
  put_activation(chunk, micro_batch, activation);
}

Tensor StageLinks::receive_gradient(int chunk, int micro_batch, const Tensor& output) {
  trace::Span wait("wait gradient", "idle", lane_);
  return take_gradient(chunk, micro_batch, output);
}

void StageLinks::send_gradient(int chunk, int micro_batch, const Tensor& gradient) {
  bytes_sent_ += static_cast<int64_t>(gradient.nbytes());
  put_gradient(chunk, micro_batch, gradient);
}

namespace {

// A forward or backward pass of one micro-batch, for its scope: a span in the
// trace (on a GPU, the GPU's time), and the stage's busy time.
class TimedPass {
 public:
  TimedPass(const char* name, const StageTask& task, StageStats& stats)
      : span_(name, "compute", task.lane, task.device), stats_(stats) {}
  ~TimedPass() { stats_.busy_seconds += watch_.seconds(); }

 private:
  trace::Span span_;
  StageStats& stats_;
  Stopwatch watch_;
};

// The last stage's loss of micro-batch `mb`, weighted by its share of the
// batch so that the micro-batches' losses add up to the batch's.
Tensor weighted_loss(const LastStage& last, const Tensor& output, int mb, Device device) {
  const Tensor& target = last.targets[mb];
  LOOM_CHECK(output.size(0) == target.size(0), "pipeline: micro-batch ", mb, " has ", output.size(0),
             " samples but its targets have ", target.size(0));
  const double share = static_cast<double>(target.size(0)) / last.batch;
  Tensor loss = last.loss(output, target.to(device)) * share;
  last.losses[mb] = loss.detach();
  return loss;
}

}  // namespace

StageStats run_stage(const std::vector<Action>& actions, const StageTask& task, StageLinks& links) {
  StageStats stats;
  const int last_chunk = static_cast<int>(task.chunks.size()) - 1;
  // Each (chunk, micro-batch)'s input and output, held from its forward to
  // its backward (B or I), and after an I what its W will compute.
  std::map<std::pair<int, int>, Tensor> inputs, outputs;
  std::map<std::pair<int, int>, autograd::WeightGradients> weights;
  int held = 0;  // micro-batch chunks between F and B (or W)
  size_t weight_passes_left = 0;  // B and W: the passes that accumulate the weights' gradients
  for (const Action& a : actions) weight_passes_left += a.pass == Pass::Backward || a.pass == Pass::BackwardWeight;
  for (const Action& a : actions) {
    const int mb = a.micro_batch, chunk = a.chunk;
    LOOM_CHECK(chunk >= 0 && chunk <= last_chunk, "pipeline: the schedule runs chunk ", chunk, " of a stage with ",
               last_chunk + 1);
    // The model's first part reads the batch; its last one computes the loss.
    const bool reads_batch = task.first && chunk == 0, ends_model = task.last && chunk == last_chunk;
    const std::pair<int, int> key{chunk, mb};
    if (a.pass == Pass::Forward) {
      Tensor in = reads_batch ? task.first->micro_batches[mb].to(task.device)
                              : links.receive_activation(chunk, mb).detach().requires_grad_();  // the chunk's graph starts here
      Tensor out;
      {
        TimedPass pass("forward", task, stats);
        out = task.chunks[chunk].get().forward(in);
        if (ends_model) out = weighted_loss(*task.last, out, mb, task.device);
      }
      if (!ends_model) links.send_activation(chunk, mb, out.detach());
      inputs[key] = in;
      outputs[key] = out;
      stats.peak_in_flight = std::max(stats.peak_in_flight, ++held);
    } else if (a.pass == Pass::Backward || a.pass == Pass::BackwardInput) {
      auto output = outputs.find(key);
      LOOM_CHECK(output != outputs.end(), "pipeline: the schedule runs backward of micro-batch ", mb,
                 " before its forward");
      const Tensor grad = ends_model ? Tensor() : links.receive_gradient(chunk, mb, output->second);
      const TensorList roots{output->second}, grads = ends_model ? TensorList{} : TensorList{grad};
      const Tensor& input = inputs.at(key);
      if (a.pass == Pass::Backward) {
        if (task.before_backward) task.before_backward(--weight_passes_left == 0);
        TimedPass pass("backward", task, stats);
        autograd::backward(roots, grads);
        --held;
      } else {  // the input's gradient now, the weights' at this micro-batch's W
        TimedPass pass("backward input", task, stats);
        weights.emplace(key, autograd::backward_inputs_first(roots, grads, reads_batch ? TensorList{} : TensorList{input}));
      }
      // An input the chunk's output does not depend on gets no gradient: send zeros.
      if (!reads_batch) links.send_gradient(chunk, mb, input.grad().defined() ? input.grad() : zeros_like(input));
      inputs.erase(key);
      outputs.erase(output);  // its activations are freed (after an I, all but what its W needs)
    } else {
      auto pending = weights.find(key);
      LOOM_CHECK(pending != weights.end(), "pipeline: the schedule runs the weights' backward (W) of micro-batch ",
                 mb, " before its input's (I)");
      if (task.before_backward) task.before_backward(--weight_passes_left == 0);
      {
        TimedPass pass("backward weight", task, stats);
        pending->second.compute();
      }
      weights.erase(pending);
      --held;
    }
  }
  LOOM_CHECK(weights.empty(), "pipeline: the schedule left ", weights.size(),
             " micro-batches' weight gradients (W) unrun");
  stats.bytes_sent = links.bytes_sent();
  return stats;
}

}  // namespace loom::parallel
