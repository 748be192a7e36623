#include "parallel/pipeline/stage_runner.h"

#include <algorithm>
#include <map>
#include <utility>

#include "autograd/engine.h"
#include "autograd/split_backward.h"

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

namespace {

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

// One stage through one step: what each (chunk, micro-batch) holds between
// its passes, and what the stage measured. Each method is one pass of the
// schedule.
class StageRun {
 public:
  StageRun(const std::vector<Action>& actions, const StageTask& task, StageLinks& links)
      : task_(task), links_(links), last_chunk_(static_cast<int>(task.chunks.size()) - 1),
        weight_passes_left_(task.chunks.size(), 0) {
    for (const Action& a : actions)
      if ((a.pass == Pass::Backward || a.pass == Pass::BackwardWeight) && a.chunk >= 0 && a.chunk <= last_chunk_)
        ++weight_passes_left_[a.chunk];
    stats_.passes.reserve(actions.size());
  }

  void forward(int chunk, int mb) {
    Tensor in = reads_batch(chunk) ? task_.first->micro_batches[mb].to(task_.device)
                                   : links_.receive_activation(chunk, mb).detach().requires_grad_();  // the chunk's graph starts here
    Tensor out;
    {
      const TimedPass pass = timed("forward", Pass::Forward, chunk, mb);
      out = task_.chunks[chunk].get().forward(in);
      if (ends_model(chunk)) out = weighted_loss(*task_.last, out, mb, task_.device);
    }
    if (!ends_model(chunk)) links_.send_activation(chunk, mb, out.detach());
    inputs_[{chunk, mb}] = in;
    outputs_[{chunk, mb}] = out;
    stats_.peak_in_flight = std::max(stats_.peak_in_flight, ++held_);
  }

  // B (the whole backward) or I (the input's gradient now, the weights' at
  // this micro-batch's W); either sends the input's gradient upstream.
  void backward(int chunk, int mb, bool whole) {
    auto output = outputs_.find({chunk, mb});
    LOOM_CHECK(output != outputs_.end(), "pipeline: the schedule runs backward of micro-batch ", mb,
               " before its forward");
    const TensorList roots{output->second};
    const TensorList grads = ends_model(chunk) ? TensorList{} : TensorList{links_.receive_gradient(chunk, mb, roots[0])};
    const Tensor input = inputs_.at({chunk, mb});
    if (whole) {
      before_weight_pass(chunk);
      const TimedPass pass = timed("backward", Pass::Backward, chunk, mb);
      autograd::backward(roots, grads);
      --held_;
    } else {
      const TimedPass pass = timed("backward input", Pass::BackwardInput, chunk, mb);
      weights_.emplace(std::pair{chunk, mb}, autograd::backward_inputs_first(
                                                 roots, grads, reads_batch(chunk) ? TensorList{} : TensorList{input}));
    }
    // An input the chunk's output does not depend on gets no gradient: send zeros.
    if (!reads_batch(chunk)) links_.send_gradient(chunk, mb, input.grad().defined() ? input.grad() : zeros_like(input));
    inputs_.erase({chunk, mb});
    outputs_.erase(output);  // its activations are freed (after an I, all but what its W needs)
  }

  // W: the weights' gradients that this micro-batch's I left.
  void weight_backward(int chunk, int mb) {
    auto pending = weights_.find({chunk, mb});
    LOOM_CHECK(pending != weights_.end(), "pipeline: the schedule runs the weights' backward (W) of micro-batch ", mb,
               " before its input's (I)");
    before_weight_pass(chunk);
    {
      const TimedPass pass = timed("backward weight", Pass::BackwardWeight, chunk, mb);
      pending->second.compute();
    }
    weights_.erase(pending);
    --held_;
  }

  StageStats finish() {
    LOOM_CHECK(weights_.empty(), "pipeline: the schedule left ", weights_.size(),
               " micro-batches' weight gradients (W) unrun");
    stats_.bytes_sent = links_.bytes_sent();
    return stats_;
  }

  void check_chunk(int chunk) const {
    LOOM_CHECK(chunk >= 0 && chunk <= last_chunk_, "pipeline: the schedule runs chunk ", chunk, " of a stage with ",
               last_chunk_ + 1);
  }

 private:
  // The model's first part reads the batch; its last one computes the loss.
  bool reads_batch(int chunk) const { return task_.first && chunk == 0; }
  bool ends_model(int chunk) const { return task_.last && chunk == last_chunk_; }
  // A pass, for its scope: a span in the trace and the stage's statistics.
  TimedPass timed(const char* name, Pass pass, int chunk, int mb) {
    return TimedPass(name, {pass, mb, chunk}, task_.lane, task_.device, task_.step_start, stats_);
  }
  // B and W accumulate the weights' gradients; the task hears before each
  // whether it is its chunk's last of the step (a hybrid averages over its
  // data group then).
  void before_weight_pass(int chunk) {
    if (task_.before_backward) task_.before_backward(chunk, --weight_passes_left_[chunk] == 0);
  }

  const StageTask& task_;
  StageLinks& links_;
  const int last_chunk_;
  StageStats stats_;
  std::map<std::pair<int, int>, Tensor> inputs_, outputs_;  // from F to B or I
  std::map<std::pair<int, int>, autograd::WeightGradients> weights_;  // from I to W
  int held_ = 0;                   // micro-batch chunks between F and B (or W)
  std::vector<size_t> weight_passes_left_;  // [chunk]
};

}  // namespace

StageStats run_stage(const std::vector<Action>& actions, const StageTask& task, StageLinks& links) {
  StageRun run(actions, task, links);
  for (const Action& a : actions) {
    run.check_chunk(a.chunk);
    switch (a.pass) {
      case Pass::Forward: run.forward(a.chunk, a.micro_batch); break;
      case Pass::Backward: run.backward(a.chunk, a.micro_batch, /*whole=*/true); break;
      case Pass::BackwardInput: run.backward(a.chunk, a.micro_batch, /*whole=*/false); break;
      case Pass::BackwardWeight: run.weight_backward(a.chunk, a.micro_batch); break;
    }
  }
  return run.finish();
}

}  // namespace loom::parallel
