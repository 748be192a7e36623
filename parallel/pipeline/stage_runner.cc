#include "parallel/pipeline/stage_runner.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "autograd/engine.h"
#include "parallel/trace.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {
namespace {


}  // namespace

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

StageStats run_stage(const std::vector<Action>& actions, const StageTask& task, StageLinks& links) {
  StageStats stats;
  const int lane = task.lane;
  std::map<int, Tensor> stage_inputs, stage_outputs;  // activations held for backward
  // Busy time counts the passes themselves; waiting for a neighbour is idle.
  auto timed = [&](const char* name, auto&& pass) {
    const auto start = std::chrono::steady_clock::now();
    trace::Span span(name, "compute", lane, task.device);  // on a GPU: the GPU's time of the pass
    pass();
    stats.busy_seconds += seconds_since(start);
  };
  for (const Action& a : actions) {
    const int mb = a.micro_batch;
    if (a.pass == Pass::Forward) {
      Tensor in;
      if (task.first) {
        in = (*task.inputs)[mb].to(task.device);
      } else {
        trace::Span wait("wait activation", "idle", lane);
        in = links.receive_activation(mb).detach().requires_grad_();  // this stage's graph starts here
      }
      Tensor out;
      timed("forward", [&] {
        out = task.module->forward(in);
        if (task.last) {
          const Tensor& target = (*task.targets)[mb];
          LOOM_CHECK(out.size(0) == target.size(0), "pipeline: micro-batch ", mb, " has ", out.size(0),
                     " samples but its targets have ", target.size(0));
          // Weighted by the micro-batch's share, the losses add up to the batch's.
          const double share = static_cast<double>(target.size(0)) / task.batch;
          out = (*task.loss)(out, target.to(task.device)) * share;
          (*task.losses)[mb] = out.detach();
        }
      });
      if (!task.last) {
        Tensor sent = out.detach();
        stats.bytes_sent += static_cast<int64_t>(sent.nbytes());
        links.send_activation(mb, sent);
      }
      stage_inputs[mb] = in;
      stage_outputs[mb] = out;
      stats.peak_in_flight = std::max(stats.peak_in_flight, static_cast<int>(stage_outputs.size()));
    } else {
      auto output = stage_outputs.find(mb);
      LOOM_CHECK(output != stage_outputs.end(), "pipeline: the schedule runs backward of micro-batch ", mb,
                 " before its forward");
      Tensor grad;
      if (!task.last) {
        trace::Span wait("wait gradient", "idle", lane);
        grad = links.receive_gradient(mb, output->second);
      }
      timed("backward", [&] {
        if (task.last)
          autograd::backward({output->second});
        else
          autograd::backward({output->second}, {grad});
      });
      if (!task.first) {
        const Tensor& input = stage_inputs.at(mb);
        // An input the stage's output does not depend on gets no gradient: send zeros.
        Tensor sent = input.grad().defined() ? input.grad() : zeros_like(input);
        stats.bytes_sent += static_cast<int64_t>(sent.nbytes());
        links.send_gradient(mb, sent);
      }
      stage_inputs.erase(mb);
      stage_outputs.erase(output);  // its activations are freed
    }
  }
  return stats;
}

}  // namespace loom::parallel
