#include "autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "autograd/engine.h"
#include "tensor/ops.h"

namespace loom::autograd {
namespace {

double projected(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                 const Tensor& v) {
  NoGradGuard no_grad;
  return sum(fn(inputs).to(kFloat64) * v).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                          const GradcheckOptions& options) {
  TensorList differentiable;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    LOOM_CHECK(x.dtype() == kFloat64 && x.device().is_cpu() && x.is_contiguous() && x.is_leaf(),
               "gradcheck: input ", k, " must be a contiguous float64 CPU leaf, got ", x.dtype(), " on ",
               x.device());
    differentiable.push_back(x);
  }
  LOOM_CHECK(!differentiable.empty(), "gradcheck: no input requires grad");

  Tensor y = fn(inputs);
  LOOM_CHECK(y.requires_grad(), "gradcheck: the output does not depend on any input that requires grad");
  Generator gen(options.seed);
  Tensor v = randn(y.shape(), {.dtype = y.dtype(), .device = y.device()}, &gen);
  TensorList analytic = grad({y}, differentiable, {v});
  Tensor v64 = v.to(kFloat64);

  for (size_t k = 0; k < differentiable.size(); ++k) {
    const Tensor& x = differentiable[k];
    std::vector<double> a = analytic[k].defined() ? analytic[k].to_vector<double>()
                                                  : std::vector<double>(x.numel(), 0.0);
    double* data = x.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double original = data[i];
      data[i] = original + options.eps;
      const double plus = projected(fn, inputs, v64);
      data[i] = original - options.eps;
      const double minus = projected(fn, inputs, v64);
      data[i] = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      if (!(std::abs(a[i] - numeric) <= options.atol + options.rtol * std::abs(numeric))) {
        std::ostringstream msg;
        msg << "gradcheck: input " << k << " (shape " << x.shape() << "), element " << i
            << ": analytic " << a[i] << " vs numeric " << numeric;
        return {false, msg.str()};
      }
    }
  }
  return {};
}

}  // namespace loom::autograd
