#include "nn/layers/conv.h"

#include <cmath>

#include "nn/functional.h"
#include "nn/init.h"

namespace loom::nn {

Conv2dImpl::Conv2dImpl(const Conv2dOptions& o) : Cloneable("Conv2d"), options(o) {
  LOOM_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.kernel_size > 0 && o.groups > 0,
             "Conv2d: channels, kernel_size and groups must be positive");
  LOOM_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, "Conv2d: in_channels ",
             o.in_channels, " and out_channels ", o.out_channels, " must both divide into ", o.groups, " groups");
  reset();
}

void Conv2dImpl::reset() {
  const int64_t k = options.kernel_size;
  weight = register_parameter("weight", empty({options.out_channels, options.in_channels / options.groups, k, k}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));  // PyTorch's default, as for Linear
  bias = Tensor();
  if (options.bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in(weight)));
    bias = register_parameter("bias", empty({options.out_channels}));
    init::uniform_(bias, -bound, bound);
  }
}

Conv2dParams Conv2dImpl::params() const {
  Conv2dParams p;
  p.stride_h = p.stride_w = options.stride;
  p.pad_h = p.pad_w = options.padding;
  p.dilation_h = p.dilation_w = options.dilation;
  p.groups = options.groups;
  return p;
}

Tensor Conv2dImpl::forward(const Tensor& x) { return functional::conv2d(x, weight, bias, params()); }

Tensor Conv2dImpl::forward_relu(const Tensor& x) { return functional::conv2d_relu(x, weight, bias, params()); }

void Conv2dImpl::pretty_print(std::ostream& out) const {
  out << "Conv2d(" << options.in_channels << ", " << options.out_channels << ", kernel_size=" << options.kernel_size
      << ", stride=" << options.stride << ", padding=" << options.padding;
  if (options.dilation != 1) out << ", dilation=" << options.dilation;
  if (options.groups != 1) out << ", groups=" << options.groups;
  if (!options.bias) out << ", bias=false";
  out << ")";
}

}  // namespace loom::nn
