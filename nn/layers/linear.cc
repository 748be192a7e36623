#include "nn/layers/linear.h"

#include <cmath>

#include "nn/functional.h"
#include "nn/init.h"
#include "tensor/float8.h"

namespace loom::nn {

LinearImpl::LinearImpl(const LinearOptions& o) : Cloneable("Linear"), options(o) {
  LOOM_CHECK(o.in_features > 0 && o.out_features > 0, "Linear: in_features and out_features must be positive, got ",
             o.in_features, " and ", o.out_features);
  reset();
}

void LinearImpl::reset() {
  // PyTorch's defaults: Kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), for both.
  weight = register_parameter("weight", empty({options.out_features, options.in_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  bias = Tensor();
  if (options.bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.in_features));
    bias = register_parameter("bias", empty({options.out_features}));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor LinearImpl::forward(const Tensor& x) {
  if (forward_override()) return forward_override()(x);
  if (float8_training_ && x.dim() >= 1 && x.size(-1) == options.in_features &&
      float8_fits(x.numel() / options.in_features))
    return functional::float8_linear(x, weight, bias);
  return functional::linear(x, weight, bias);
}

void LinearImpl::set_float8_training(bool on) {
  LOOM_CHECK(!on || (float8_fits(options.in_features) && float8_fits(options.out_features)),
             "Linear(in_features=", options.in_features, ", out_features=", options.out_features,
             "): float8 training needs both to be multiples of 16 (the tensor cores' float8 products read ",
             "16-byte aligned rows)");
  float8_training_ = on;
}

void LinearImpl::pretty_print(std::ostream& out) const {
  out << "Linear(in_features=" << options.in_features << ", out_features=" << options.out_features
      << ", bias=" << (options.bias ? "true" : "false") << (float8_training_ ? ", float8=true" : "") << ")";
}

}  // namespace loom::nn
