// A pipeline stage whose forward and backward each take a fixed time without
// using a core (they sleep), so stages overlap as on separate devices even on
// a machine with fewer cores than stages. Its output is its input times a
// learnable scale. Its backward is selective (autograd/node.h): `ms` for the
// input's gradient, `weight_ms` more for the scale's, so a split backward's I
// and W passes (zero-bubble schedules) take those times.
#pragma once

#include <chrono>
#include <thread>

#include "autograd/node.h"
#include "nn/nn.h"

namespace loom::parallel::testing {

class SleepStageImpl : public nn::Cloneable<SleepStageImpl> {
 public:
  explicit SleepStageImpl(int ms, int weight_ms = 0) : Cloneable("SleepStage"), ms_(ms), weight_ms_(weight_ms) {
    reset();
  }
  void reset() override { scale = register_parameter("scale", ones({1})); }
  Tensor forward(const Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    Tensor y = x.detach() * scale.detach();
    autograd::record_selective(
        "SleepStageBackward", {x, scale}, {y},
        [ms = ms_, weight_ms = weight_ms_, x = x.detach()](const TensorList& g, const autograd::InputMask& wanted) {
          TensorList grads(2);
          if (autograd::wants(wanted, 0)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
            grads[0] = g[0];
          }
          if (autograd::wants(wanted, 1)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(weight_ms));
            grads[1] = sum(g[0] * x).reshape({1});
          }
          return grads;
        });
    return y;
  }
  int ms_, weight_ms_;
  Tensor scale;
};

// The loss the sleep-stage tests use: the output's sum (targets unused).
inline Tensor sum_loss(const Tensor& out, const Tensor&) { return out.sum(); }

}  // namespace loom::parallel::testing
