// A training step run as a CUDA graph (tensor/device_graph.h) where it can
// be, eagerly where it cannot: the examples' --cuda-graph.
//
// The first `warmup` full-size batches run eagerly (the optimizer's state,
// cuDNN's algorithm choices), then the step is captured over static copies
// of a batch and every later batch of that shape is copied into them and
// replayed. A batch of another shape (an epoch's short last one) runs
// eagerly, with the same model and optimizer. Disabled, it calls the step.
//
//   GraphedStep graphed(cuda_graph, device);
//   for (auto& [x, y] : loader.epoch(epoch)) {
//     Tensor loss = graphed(x, y, [&](const Tensor& x, const Tensor& y) {
//       Tensor l = cross_entropy(model->forward(x), y);
//       opt.zero_grad();
//       l.backward();
//       opt.step();                      // a capturable optimizer
//       return l;
//     });
//     // the loss tensor is the graph's: read or use it before the next step
//   }
#pragma once

#include <functional>
#include <optional>

#include "tensor/device_graph.h"

namespace loom::examples {

class GraphedStep {
 public:
  using Step = std::function<Tensor(const Tensor& input, const Tensor& target)>;

  GraphedStep(bool enabled, Device device, int warmup = 2);
  Tensor operator()(const Tensor& input, const Tensor& target, const Step& step);
  // Steps replayed so far (the rest ran eagerly).
  int64_t replays() const { return replays_; }

 private:
  bool enabled_;
  Device device_;
  int warmup_left_;
  std::optional<DeviceGraph> graph_;
  Tensor input_, target_, loss_;  // the graph's static tensors
  int64_t replays_ = 0;
};

}  // namespace loom::examples
