// Conv2d over NCHW images, with square kernels, strides, padding and dilation.
//
//   nn::Conv2d conv({.in_channels = 1, .out_channels = 32, .kernel_size = 3, .padding = 1});
//   Tensor y = conv->forward(x);                   // (N, 1, 28, 28) -> (N, 32, 28, 28)
#pragma once

#include "nn/module.h"
#include "tensor/backend.h"

namespace loom::nn {

struct Conv2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int kernel_size = 1;
  int stride = 1;
  int padding = 0;
  int dilation = 1;
  int groups = 1;
  bool bias = true;
};

class Conv2dImpl : public Cloneable<Conv2dImpl> {
 public:
  using Options = Conv2dOptions;
  explicit Conv2dImpl(const Conv2dOptions& options);

  void reset() override;
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) in one pass (functional::conv2d_relu); Sequential calls
  // it for a Conv2d followed by a ReLU.
  Tensor forward_relu(const Tensor& x);
  void pretty_print(std::ostream& out) const override;
  Conv2dParams params() const;

  Conv2dOptions options;
  Tensor weight, bias;
};
LOOM_MODULE(Conv2d);

}  // namespace loom::nn
