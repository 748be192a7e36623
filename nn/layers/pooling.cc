#include "nn/layers/pooling.h"

#include "nn/functional.h"

namespace loom::nn {
namespace {

Pool2dParams params_of(const Pool2dOptions& o) {
  Pool2dParams p;
  p.kernel_h = p.kernel_w = o.kernel_size;
  p.stride_h = p.stride_w = o.stride > 0 ? o.stride : o.kernel_size;
  p.pad_h = p.pad_w = o.padding;
  return p;
}

void print_pool(std::ostream& out, const char* name, const Pool2dOptions& o) {
  out << name << "(kernel_size=" << o.kernel_size << ", stride=" << (o.stride > 0 ? o.stride : o.kernel_size)
      << ", padding=" << o.padding << ")";
}

}  // namespace

Tensor MaxPool2dImpl::forward(const Tensor& x) { return functional::max_pool2d(x, params_of(options)); }
void MaxPool2dImpl::pretty_print(std::ostream& out) const { print_pool(out, "MaxPool2d", options); }

Tensor AvgPool2dImpl::forward(const Tensor& x) { return functional::avg_pool2d(x, params_of(options)); }
void AvgPool2dImpl::pretty_print(std::ostream& out) const { print_pool(out, "AvgPool2d", options); }

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) {
  return functional::adaptive_avg_pool2d(x, options.output_h, options.output_w);
}
void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& out) const {
  out << "AdaptiveAvgPool2d(output_size=(" << options.output_h << ", " << options.output_w << "))";
}

}  // namespace loom::nn
