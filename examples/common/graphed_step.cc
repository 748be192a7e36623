#include "examples/common/graphed_step.h"

namespace loom::examples {

GraphedStep::GraphedStep(bool enabled, Device device, int warmup)
    : enabled_(enabled), device_(device), warmup_left_(warmup) {
  LOOM_CHECK(!enabled || device.is_cuda(), "--cuda-graph needs a CUDA device (--device cuda), got ", device);
}

Tensor GraphedStep::operator()(const Tensor& input, const Tensor& target, const Step& step) {
  if (!enabled_) return step(input, target);
  if (graph_ && (input.shape() != input_.shape() || target.shape() != target_.shape()))
    return step(input, target);  // another shape: eagerly
  if (!graph_ && warmup_left_ > 0) {
    --warmup_left_;
    return step(input, target);
  }
  if (!graph_) {
    input_ = input.clone();
    target_ = target.clone();
    graph_.emplace(device_);
    graph_->capture([&] { loss_ = step(input_, target_); });
  } else {
    input_.copy_(input);
    target_.copy_(target);
  }
  graph_->replay();  // the capture ran nothing: this batch's step is its first replay
  ++replays_;
  return loss_;
}

}  // namespace loom::examples
