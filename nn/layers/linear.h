// Linear: y = x W^T + b, with W (out_features, in_features).
//
//   nn::Linear fc(784, 128);                       // or nn::Linear({.in_features = 784, .out_features = 128})
//   Tensor y = fc->forward(x);                     // x (..., 784) -> y (..., 128)
//
// In float8 training (nn/float8_training.h) its products run in float8
// (functional::float8_linear); its parameters stay as they are.
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

  // From now on, forward runs functional::float8_linear wherever the rows of
  // x (its leading dims together) are a multiple of 16, and linear for other
  // batches (generation's single tokens); `false` goes back. in_features and
  // out_features must be multiples of 16. Clones keep the setting.
  void set_float8_training(bool on);
  bool float8_training() const { return float8_training_; }

  LinearOptions options;
  Tensor weight, bias;

 private:
  bool float8_training_ = false;
};
LOOM_MODULE(Linear);

}  // namespace loom::nn
