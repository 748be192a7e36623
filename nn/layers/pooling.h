// Pooling layers over NCHW images.
//
//   nn::MaxPool2d pool(2);                         // 2x2 windows, stride 2
//   nn::AdaptiveAvgPool2d gap(1);                  // global average pooling
#pragma once

#include "nn/module.h"

namespace loom::nn {

struct Pool2dOptions {
  int kernel_size = 1;
  int stride = 0;  // 0: the kernel size, as PyTorch's default
  int padding = 0;
};

class MaxPool2dImpl : public Cloneable<MaxPool2dImpl> {
 public:
  using Options = Pool2dOptions;
  explicit MaxPool2dImpl(const Pool2dOptions& options) : Cloneable("MaxPool2d"), options(options) {}
  explicit MaxPool2dImpl(int kernel_size) : MaxPool2dImpl(Pool2dOptions{kernel_size}) {}
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;
  Pool2dOptions options;
};
LOOM_MODULE(MaxPool2d);

// Averages include the zero padding in the divisor (count_include_pad=True).
class AvgPool2dImpl : public Cloneable<AvgPool2dImpl> {
 public:
  using Options = Pool2dOptions;
  explicit AvgPool2dImpl(const Pool2dOptions& options) : Cloneable("AvgPool2d"), options(options) {}
  explicit AvgPool2dImpl(int kernel_size) : AvgPool2dImpl(Pool2dOptions{kernel_size}) {}
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;
  Pool2dOptions options;
};
LOOM_MODULE(AvgPool2d);

struct AdaptiveAvgPool2dOptions {
  int64_t output_h = 1;
  int64_t output_w = 1;
};

class AdaptiveAvgPool2dImpl : public Cloneable<AdaptiveAvgPool2dImpl> {
 public:
  using Options = AdaptiveAvgPool2dOptions;
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options)
      : Cloneable("AdaptiveAvgPool2d"), options(options) {}
  explicit AdaptiveAvgPool2dImpl(int64_t output_size) : AdaptiveAvgPool2dImpl({output_size, output_size}) {}
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;
  AdaptiveAvgPool2dOptions options;
};
LOOM_MODULE(AdaptiveAvgPool2d);

}  // namespace loom::nn
