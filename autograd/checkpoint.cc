#include "autograd/checkpoint.h"

#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/error.h"
#include "tensor/autocast.h"
#include "tensor/generator.h"

namespace loom::autograd {

namespace {

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }

 private:
  bool previous_;
};

// Runs `fn` drawing the forward's random numbers (`draws`, recorded on the
// forward's thread) and advancing no generator, so the stream of later
// numbers is untouched, also for other threads drawing meanwhile. It runs
// under the forward's autocast, so it computes in the forward's dtypes.
TensorList replay(const CheckpointFn& fn, const TensorList& inputs, const std::vector<Draw>& draws,
                  std::optional<DType> autocast) {
  DrawReplay forward_numbers(draws);
  GradModeGuard grad_on(true);
  AutocastGuard as_in_forward(autocast);  // backward turned it off
  return fn(inputs);
}

}  // namespace

TensorList checkpoint(const CheckpointFn& fn, const TensorList& inputs) {
  if (!grad_enabled()) return fn(inputs);
  const std::optional<DType> autocast = autocast_dtype();
  TensorList outputs;
  std::vector<Draw> draws;
  {
    NoGradGuard no_grad;
    DrawRecording record(draws);
    outputs = fn(inputs);
  }
  std::vector<SavedTensor> saved;
  std::vector<bool> wants_grad;
  for (const Tensor& t : inputs) {
    LOOM_CHECK(t.defined(), "checkpoint: an input is undefined");
    saved.emplace_back(t);
    wants_grad.push_back(t.requires_grad());
  }
  TensorList results;
  for (const Tensor& t : outputs) {
    LOOM_CHECK(t.defined(), "checkpoint: the function returned an undefined tensor");
    LOOM_CHECK(is_floating(t.dtype()), "checkpoint: the function returned a ", t.dtype(),
               " tensor; outputs of a checkpointed segment carry gradients, so they are floating-point");
    results.push_back(t.detach());  // a handle of its own: record() makes it the node's output
  }
  record("CheckpointBackward", inputs, results, [fn, saved, wants_grad, draws, autocast](const TensorList& grads) {
    TensorList replay_inputs;
    for (size_t i = 0; i < saved.size(); ++i) {
      Tensor t = saved[i].get().detach();
      if (wants_grad[i]) t.requires_grad_();
      replay_inputs.push_back(t);
    }
    const TensorList recomputed = replay(fn, replay_inputs, draws, autocast);
    LOOM_CHECK(recomputed.size() == grads.size(), "checkpoint: the replay returned ", recomputed.size(),
               " tensors, the forward ", grads.size(), "; the function must compute the same thing twice");
    TensorList roots, root_grads;
    for (size_t i = 0; i < recomputed.size(); ++i)
      if (grads[i].defined() && recomputed[i].requires_grad()) {
        roots.push_back(recomputed[i]);
        root_grads.push_back(grads[i]);
      }
    if (!roots.empty()) backward_nested(roots, root_grads, replay_inputs);
    TensorList input_grads;
    for (size_t i = 0; i < replay_inputs.size(); ++i)
      input_grads.push_back(wants_grad[i] ? replay_inputs[i].grad() : Tensor());
    return input_grads;
  });
  return results;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  return checkpoint([fn](const TensorList& in) { return TensorList{fn(in[0])}; }, TensorList{input})[0];
}

}  // namespace loom::autograd
