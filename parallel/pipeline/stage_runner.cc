#include "parallel/pipeline/stage_runner.h"

#include <algorithm>
#include <map>

#include "autograd/engine.h"
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

Tensor StageLinks::receive_activation(int micro_batch) {
  trace::Span wait("wait activation", "idle", lane_);
  return take_activation(micro_batch);
}

void StageLinks::send_activation(int micro_batch, const Tensor& activation) {
  bytes_sent_ += static_cast<int64_t>(activation.nbytes());
  put_activation(micro_batch, activation);
}

Tensor StageLinks::receive_gradient(int micro_batch, const Tensor& output) {
  trace::Span wait("wait gradient", "idle", lane_);
  return take_gradient(micro_batch, output);
}

void StageLinks::send_gradient(int micro_batch, const Tensor& gradient) {
  bytes_sent_ += static_cast<int64_t>(gradient.nbytes());
  put_gradient(micro_batch, gradient);
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
  // Each micro-batch's input and output, held from its forward to its backward.
  std::map<int, Tensor> inputs, outputs;
  size_t backwards_left = 0;
  for (const Action& a : actions) backwards_left += a.pass == Pass::Backward ? 1 : 0;
  for (const Action& a : actions) {
    const int mb = a.micro_batch;
    if (a.pass == Pass::Forward) {
      Tensor in = task.first ? task.first->micro_batches[mb].to(task.device)
                             : links.receive_activation(mb).detach().requires_grad_();  // the stage's graph starts here
      Tensor out;
      {
        TimedPass pass("forward", task, stats);
        out = task.module.forward(in);
        if (task.last) out = weighted_loss(*task.last, out, mb, task.device);
      }
      if (!task.last) links.send_activation(mb, out.detach());
      inputs[mb] = in;
      outputs[mb] = out;
      stats.peak_in_flight = std::max(stats.peak_in_flight, static_cast<int>(outputs.size()));
    } else {
      auto output = outputs.find(mb);
      LOOM_CHECK(output != outputs.end(), "pipeline: the schedule runs backward of micro-batch ", mb,
                 " before its forward");
      const Tensor grad = task.last ? Tensor() : links.receive_gradient(mb, output->second);
      if (task.before_backward) task.before_backward(--backwards_left == 0);
      {
        TimedPass pass("backward", task, stats);
        if (task.last)
          autograd::backward({output->second});
        else
          autograd::backward({output->second}, {grad});
      }
      if (!task.first) {
        const Tensor& input = inputs.at(mb);
        // An input the stage's output does not depend on gets no gradient: send zeros.
        links.send_gradient(mb, input.grad().defined() ? input.grad() : zeros_like(input));
      }
      inputs.erase(mb);
      outputs.erase(output);  // its activations are freed
    }
  }
  stats.bytes_sent = links.bytes_sent();
  return stats;
}

}  // namespace loom::parallel
