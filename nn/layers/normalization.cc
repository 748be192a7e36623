#include "nn/layers/normalization.h"

#include "nn/functional.h"
#include "nn/init.h"

namespace loom::nn {

BatchNorm2dImpl::BatchNorm2dImpl(const BatchNorm2dOptions& o) : Cloneable("BatchNorm2d"), options(o) {
  LOOM_CHECK(o.num_features > 0, "BatchNorm2d: num_features must be positive, got ", o.num_features);
  reset();
}

void BatchNorm2dImpl::reset() {
  weight = bias = Tensor();
  if (options.affine) {
    weight = register_parameter("weight", ones({options.num_features}));
    bias = register_parameter("bias", zeros({options.num_features}));
  }
  running_mean = register_buffer("running_mean", zeros({options.num_features}));
  running_var = register_buffer("running_var", ones({options.num_features}));
}

Tensor BatchNorm2dImpl::forward(const Tensor& x) {
  LOOM_CHECK(x.dim() == 4, "BatchNorm2d: expected a 4-D input (N, C, H, W), got shape ", x.shape());
  return functional::batch_norm(x, running_mean, running_var, weight, bias, is_training(), options.momentum,
                                options.eps);
}

void BatchNorm2dImpl::pretty_print(std::ostream& out) const {
  out << "BatchNorm2d(" << options.num_features << ", eps=" << options.eps << ", momentum=" << options.momentum
      << ", affine=" << (options.affine ? "true" : "false") << ")";
}

LayerNormImpl::LayerNormImpl(const LayerNormOptions& o) : Cloneable("LayerNorm"), options(o) {
  LOOM_CHECK(!o.normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  reset();
}

void LayerNormImpl::reset() {
  weight = bias = Tensor();
  if (options.elementwise_affine) {
    weight = register_parameter("weight", ones(Shape(options.normalized_shape)));
    bias = register_parameter("bias", zeros(Shape(options.normalized_shape)));
  }
}

Tensor LayerNormImpl::forward(const Tensor& x) {
  if (forward_override()) return forward_override()(x);
  return functional::layer_norm(x, options.normalized_shape, weight, bias, options.eps);
}

void LayerNormImpl::pretty_print(std::ostream& out) const {
  out << "LayerNorm(" << Shape(options.normalized_shape) << ", eps=" << options.eps
      << ", elementwise_affine=" << (options.elementwise_affine ? "true" : "false") << ")";
}

}  // namespace loom::nn
