// Unary elementwise ops and activations: forward kernel call and gradient.
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

using autograd::SavedTensor;

// Integer inputs of floating-point math are promoted to float32, as in PyTorch.
Tensor floating_input(const Tensor& x) {
  return is_floating(x.dtype()) ? x : detail::cast_raw(x, kFloat32);
}

Tensor unary_raw(UnaryOp op, const Tensor& x, double alpha = 0, double beta = 0) {
  Tensor out = empty(x.shape(), x.options());
  if (out.numel() > 0) backend_for(x.device()).unary(op, x, out, alpha, beta);
  return out;
}

Tensor binary_raw(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = empty(a.shape(), a.options());
  if (out.numel() > 0) backend_for(a.device()).binary(op, a, b, out, 1.0);
  return out;
}

// Forward of a float op whose gradient needs only its input or only its
// output: grad(dy, saved) with saved = x (Saved::Input) or y (Saved::Output).
enum class Saved { Input, Output };

template <typename Grad>
Tensor float_unary(const char* op, const char* node, UnaryOp kind, const Tensor& x_in, Saved saved,
                   Grad grad, double alpha = 0) {
  detail::check_defined(op, x_in);
  Tensor x = floating_input(x_in);
  Tensor y = unary_raw(kind, x, alpha);
  if (autograd::needs_grad(x_in))
    autograd::record(node, {x_in}, y,
                     [s = SavedTensor(saved == Saved::Input ? x : y), grad](const TensorList& g) {
                       return TensorList{grad(g[0], s.get())};
                     });
  return y;
}

// GELU's tanh form, where the backend computes it and its derivative in one
// pass (Backend::unary_with_derivative): the backward is dy * dydx, and
// dydx, not x, is what the graph keeps (the same size).
Tensor gelu_tanh_saving_derivative(const Tensor& x) {
  Tensor y = empty(x.shape(), x.options()), dydx = empty(x.shape(), x.options());
  backend_for(x.device()).unary_with_derivative(UnaryOp::GeluTanh, x, y, dydx);
  autograd::record("GeluBackward", {x}, y, [dydx = SavedTensor(dydx)](const TensorList& g) {
    return TensorList{binary_raw(BinaryOp::Mul, g[0], dydx.get())};
  });
  return y;
}

}  // namespace

Tensor neg(const Tensor& x) {
  detail::check_defined("neg", x);
  LOOM_CHECK(x.dtype() != kBool, "neg: not defined for bool tensors; use logical_not");
  Tensor y = unary_raw(UnaryOp::Neg, x);
  if (autograd::needs_grad(x))
    autograd::record("NegBackward", {x}, y, [](const TensorList& g) { return TensorList{-g[0]}; });
  return y;
}

Tensor abs(const Tensor& x) {
  detail::check_defined("abs", x);
  Tensor y = unary_raw(UnaryOp::Abs, x);
  if (autograd::needs_grad(x))
    autograd::record("AbsBackward", {x}, y, [x = SavedTensor(x)](const TensorList& g) {
      return TensorList{g[0] * sign(x.get())};
    });
  return y;
}

Tensor square(const Tensor& x) {
  detail::check_defined("square", x);
  Tensor y = unary_raw(UnaryOp::Square, x);
  if (autograd::needs_grad(x))
    autograd::record("SquareBackward", {x}, y, [x = SavedTensor(x)](const TensorList& g) {
      return TensorList{g[0] * x.get() * 2.0};
    });
  return y;
}

Tensor sign(const Tensor& x) {
  detail::check_defined("sign", x);
  return unary_raw(UnaryOp::Sign, x);
}

Tensor reciprocal(const Tensor& x) {  // d(1/x) = -1/x^2 = -y^2
  return float_unary("reciprocal", "ReciprocalBackward", UnaryOp::Reciprocal, x, Saved::Output,
                     [](const Tensor& g, const Tensor& y) { return -g * y * y; });
}

Tensor exp(const Tensor& x) {
  return float_unary("exp", "ExpBackward", UnaryOp::Exp, x, Saved::Output,
                     [](const Tensor& g, const Tensor& y) { return g * y; });
}

Tensor log(const Tensor& x) {
  return float_unary("log", "LogBackward", UnaryOp::Log, x, Saved::Input,
                     [](const Tensor& g, const Tensor& x) { return g / x; });
}

Tensor sqrt(const Tensor& x) {  // d sqrt(x) = 1 / (2 y)
  return float_unary("sqrt", "SqrtBackward", UnaryOp::Sqrt, x, Saved::Output,
                     [](const Tensor& g, const Tensor& y) { return g / (y * 2.0); });
}

Tensor rsqrt(const Tensor& x) {  // d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
  return float_unary("rsqrt", "RsqrtBackward", UnaryOp::Rsqrt, x, Saved::Output,
                     [](const Tensor& g, const Tensor& y) { return g * y * y * y * -0.5; });
}

Tensor sin(const Tensor& x) {
  return float_unary("sin", "SinBackward", UnaryOp::Sin, x, Saved::Input,
                     [](const Tensor& g, const Tensor& x) { return g * cos(x); });
}

Tensor cos(const Tensor& x) {
  return float_unary("cos", "CosBackward", UnaryOp::Cos, x, Saved::Input,
                     [](const Tensor& g, const Tensor& x) { return -g * sin(x); });
}

Tensor pow(const Tensor& x, double p) {  // d x^p = p x^(p-1)
  return float_unary("pow", "PowBackward", UnaryOp::PowScalar, x, Saved::Input,
                     [p](const Tensor& g, const Tensor& x) { return g * pow(x, p - 1) * p; }, p);
}

Tensor clamp(const Tensor& x, double min, double max) {
  detail::check_defined("clamp", x);
  LOOM_CHECK(min <= max, "clamp: min ", min, " is above max ", max);
  Tensor y = unary_raw(UnaryOp::Clamp, x, min, max);
  if (autograd::needs_grad(x))  // the gradient passes where x was inside [min, max]
    autograd::record("ClampBackward", {x}, y, [x = SavedTensor(x), min, max](const TensorList& g) {
      Tensor inside = logical_and(x.get() >= min, x.get() <= max);
      return TensorList{where(inside, g[0], zeros({}, g[0].options()))};
    });
  return y;
}

Tensor logical_not(const Tensor& x) {
  detail::check_defined("logical_not", x);
  return unary_raw(UnaryOp::LogicalNot, detail::cast_raw(x, kBool));
}

Tensor tanh(const Tensor& x) {
  return float_unary("tanh", "TanhBackward", UnaryOp::Tanh, x, Saved::Output,
                     [](const Tensor& g, const Tensor& y) {
                       return binary_raw(BinaryOp::TanhBackward, g, y);
                     });
}

Tensor sigmoid(const Tensor& x) {
  return float_unary("sigmoid", "SigmoidBackward", UnaryOp::Sigmoid, x, Saved::Output,
                     [](const Tensor& g, const Tensor& y) {
                       return binary_raw(BinaryOp::SigmoidBackward, g, y);
                     });
}

Tensor relu(const Tensor& x) {
  detail::check_defined("relu", x);
  Tensor y = unary_raw(UnaryOp::Relu, x);
  if (autograd::needs_grad(x))
    autograd::record("ReluBackward", {x}, y, [y = SavedTensor(y)](const TensorList& g) {
      return TensorList{binary_raw(BinaryOp::ReluBackward, g[0], y.get())};
    });
  return y;
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  const bool tanh_form = approximate == GeluApproximation::Tanh;
  if (tanh_form && x.defined() && x.numel() > 0 && x.is_contiguous() && autograd::needs_grad(x) &&
      backend_for(x.device()).has_unary_with_derivative(UnaryOp::GeluTanh, x.dtype()))
    return gelu_tanh_saving_derivative(x);
  return float_unary("gelu", "GeluBackward", tanh_form ? UnaryOp::GeluTanh : UnaryOp::GeluErf, x,
                     Saved::Input, [tanh_form](const Tensor& g, const Tensor& x) {
                       return binary_raw(tanh_form ? BinaryOp::GeluTanhBackward : BinaryOp::GeluErfBackward,
                                         g, x);
                     });
}

}  // namespace loom
