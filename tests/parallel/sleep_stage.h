// A pipeline stage whose forward and backward each take a fixed time without
// using a core (they sleep), so stages overlap as on separate devices even on
// a machine with fewer cores than stages. Its output is its input times a
// learnable scale.
#pragma once

#include <chrono>
#include <thread>

#include "autograd/node.h"
#include "nn/nn.h"

namespace loom::parallel::testing {

class SleepStageImpl : public nn::Cloneable<SleepStageImpl> {
 public:
  explicit SleepStageImpl(int ms) : Cloneable("SleepStage"), ms_(ms) { reset(); }
  void reset() override { scale = register_parameter("scale", ones({1})); }
  Tensor forward(const Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    Tensor y = x.detach() * scale.detach();
    autograd::record("SleepStageBackward", {x, scale}, y, [ms = ms_, x = x.detach()](const TensorList& g) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return TensorList{g[0], sum(g[0] * x).reshape({1})};
    });
    return y;
  }
  int ms_;
  Tensor scale;
};

// The loss the sleep-stage tests use: the output's sum (targets unused).
inline Tensor sum_loss(const Tensor& out, const Tensor&) { return out.sum(); }

}  // namespace loom::parallel::testing
