// Linear: y = x W^T + b, with W (out_features, in_features).
//
//   nn::Linear fc(784, 128);                       // or nn::Linear({.in_features = 784, .out_features = 128})
//   Tensor y = fc->forward(x);                     // x (..., 784) -> y (..., 128)
#pragma once

#include "nn/module.h"

namespace loom::nn {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
};

class LinearImpl : public Cloneable<LinearImpl> {
 public:
  using Options = LinearOptions;
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features, bool bias = true)
      : LinearImpl(LinearOptions{in_features, out_features, bias}) {}

  void reset() override;
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;

  LinearOptions options;
  Tensor weight, bias;
};
LOOM_MODULE(Linear);

}  // namespace loom::nn
