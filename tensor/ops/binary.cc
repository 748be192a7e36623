// Binary elementwise ops with broadcasting and type promotion, their
// gradients, comparisons and the operator overloads.
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

using autograd::SavedTensor;

// Both operands cast to `compute` and broadcast to their common shape, then
// the kernel; the result has `out_dtype`.
Tensor binary_forward(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b,
                      DType compute, DType out_dtype, double alpha = 1) {
  detail::check_same_device(op, a, b);
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, {.dtype = out_dtype, .device = a.device()});
  if (out.numel() > 0)
    backend_for(a.device())
        .binary(kind, detail::expand_raw(detail::cast_raw(a, compute), shape),
                detail::expand_raw(detail::cast_raw(b, compute), shape), out, alpha);
  return out;
}

DType arithmetic_dtype(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same_device(op, a, b);
  LOOM_CHECK(a.dtype() != kBool || b.dtype() != kBool, op,
             ": arithmetic on two bool tensors is not supported; convert one with .to(kInt64)");
  DType t = promote_types(a.dtype(), b.dtype());
  return t == kBool ? kInt64 : t;
}

DType floating_dtype(const char* op, const Tensor& a, const Tensor& b) {
  DType t = arithmetic_dtype(op, a, b);
  return is_floating(t) ? t : kFloat32;
}

Tensor comparison(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  detail::check_same_device(op, a, b);
  return binary_forward(op, kind, a, b, promote_types(a.dtype(), b.dtype()), kBool);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, double alpha) {
  DType t = arithmetic_dtype("add", a, b);
  Tensor y = binary_forward("add", BinaryOp::Add, a, b, t, t, alpha);
  if (autograd::needs_grad(a, b))
    autograd::record("AddBackward", {a, b}, y, [sa = a.shape(), sb = b.shape(),
                                                 ta = a.dtype(), tb = b.dtype(), alpha](const TensorList& g) {
      return TensorList{detail::sum_to(g[0], sa, ta),
                        detail::sum_to(alpha == 1 ? g[0] : g[0] * alpha, sb, tb)};
    });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b, double alpha) {
  DType t = arithmetic_dtype("sub", a, b);
  Tensor y = binary_forward("sub", BinaryOp::Sub, a, b, t, t, alpha);
  if (autograd::needs_grad(a, b))
    autograd::record("SubBackward", {a, b}, y, [sa = a.shape(), sb = b.shape(), ta = a.dtype(),
                                                 tb = b.dtype(), alpha](const TensorList& g) {
      return TensorList{detail::sum_to(g[0], sa, ta), detail::sum_to(g[0] * -alpha, sb, tb)};
    });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  DType t = arithmetic_dtype("mul", a, b);
  Tensor y = binary_forward("mul", BinaryOp::Mul, a, b, t, t);
  if (autograd::needs_grad(a, b)) {
    const bool da = a.requires_grad(), db = b.requires_grad();
    // Each side's gradient needs only the other side's value.
    autograd::record("MulBackward", {a, b}, y,
                     [sa = db ? SavedTensor(a) : SavedTensor(), sb = da ? SavedTensor(b) : SavedTensor(),
                      shape_a = a.shape(), shape_b = b.shape(), ta = a.dtype(), tb = b.dtype(), da,
                      db](const TensorList& g) {
                       return TensorList{da ? detail::sum_to(g[0] * sb.get(), shape_a, ta) : Tensor(),
                                         db ? detail::sum_to(g[0] * sa.get(), shape_b, tb) : Tensor()};
                     });
  }
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  DType t = floating_dtype("div", a, b);
  Tensor y = binary_forward("div", BinaryOp::Div, a, b, t, t);
  if (autograd::needs_grad(a, b))  // d(a/b) = da/b - a db/b^2 = (da - y db) / b
    autograd::record("DivBackward", {a, b}, y,
                     [sb = SavedTensor(b), sy = SavedTensor(y), shape_a = a.shape(), shape_b = b.shape(),
                      ta = a.dtype(), tb = b.dtype(), da = a.requires_grad(),
                      db = b.requires_grad()](const TensorList& g) {
                       Tensor ga = g[0] / sb.get();
                       return TensorList{da ? detail::sum_to(ga, shape_a, ta) : Tensor(),
                                         db ? detail::sum_to(-ga * sy.get(), shape_b, tb) : Tensor()};
                     });
  return y;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  DType t = floating_dtype("pow", a, b);
  Tensor y = binary_forward("pow", BinaryOp::Pow, a, b, t, t);
  if (autograd::needs_grad(a, b))  // d a^b = b a^(b-1) da + a^b log(a) db
    autograd::record("PowBackward", {a, b}, y,
                     [sa = SavedTensor(a), sb = SavedTensor(b), sy = SavedTensor(y), da = a.requires_grad(),
                      db = b.requires_grad()](const TensorList& g) {
                       const Tensor &x = sa.get(), &p = sb.get();
                       return TensorList{
                           da ? detail::grad_for(g[0] * p * pow(x, p - 1.0), x) : Tensor(),
                           db ? detail::grad_for(g[0] * sy.get() * log(x), p) : Tensor()};
                     });
  return y;
}

// maximum / minimum: the gradient goes to the winner; ties split it evenly.
static Tensor extremum(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b) {
  DType t = arithmetic_dtype(op, a, b);
  Tensor y = binary_forward(op, kind, a, b, t, t);
  if (autograd::needs_grad(a, b))
    autograd::record(kind == BinaryOp::Maximum ? "MaximumBackward" : "MinimumBackward", {a, b}, y,
                     [sa = SavedTensor(a), sb = SavedTensor(b), sy = SavedTensor(y)](const TensorList& g) {
                       const Tensor &x = sa.get(), &z = sb.get(), &w = sy.get();
                       Tensor share_a = (x == w).to(g[0].dtype()) - (x == z).to(g[0].dtype()) * 0.5;
                       Tensor share_b = (z == w).to(g[0].dtype()) - (x == z).to(g[0].dtype()) * 0.5;
                       return TensorList{detail::grad_for(g[0] * share_a, x), detail::grad_for(g[0] * share_b, z)};
                     });
  return y;
}

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum("maximum", BinaryOp::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum("minimum", BinaryOp::Minimum, a, b); }

Tensor lerp(const Tensor& a, const Tensor& b, double weight) {
  DType t = floating_dtype("lerp", a, b);
  Tensor y = binary_forward("lerp", BinaryOp::Lerp, a, b, t, t, weight);
  if (autograd::needs_grad(a, b))
    autograd::record("LerpBackward", {a, b}, y, [sa = a.shape(), sb = b.shape(), ta = a.dtype(),
                                                  tb = b.dtype(), weight](const TensorList& g) {
      return TensorList{detail::sum_to(g[0] * (1 - weight), sa, ta), detail::sum_to(g[0] * weight, sb, tb)};
    });
  return y;
}

Tensor eq(const Tensor& a, const Tensor& b) { return comparison("eq", BinaryOp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return comparison("ne", BinaryOp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return comparison("lt", BinaryOp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return comparison("le", BinaryOp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return comparison("gt", BinaryOp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return comparison("ge", BinaryOp::Ge, a, b); }

Tensor logical_and(const Tensor& a, const Tensor& b) {
  detail::check_same_device("logical_and", a, b);
  return binary_forward("logical_and", BinaryOp::LogicalAnd, a, b, kBool, kBool);
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  detail::check_same_device("logical_or", a, b);
  return binary_forward("logical_or", BinaryOp::LogicalOr, a, b, kBool, kBool);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  detail::check_same_device("allclose", a, b);
  NoGradGuard no_grad;
  Tensor x = a.to(kFloat64), y = b.to(kFloat64);
  Tensor close = abs(x - y) <= abs(y) * rtol + atol;
  return sum(logical_not(close)).item<int64_t>() == 0;
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, detail::scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, detail::scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, detail::scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, detail::scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(detail::scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(detail::scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(detail::scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(detail::scalar_like(a, b), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, double b) { return eq(a, detail::scalar_like(b, a)); }
Tensor operator!=(const Tensor& a, double b) { return ne(a, detail::scalar_like(b, a)); }
Tensor operator<(const Tensor& a, double b) { return lt(a, detail::scalar_like(b, a)); }
Tensor operator<=(const Tensor& a, double b) { return le(a, detail::scalar_like(b, a)); }
Tensor operator>(const Tensor& a, double b) { return gt(a, detail::scalar_like(b, a)); }
Tensor operator>=(const Tensor& a, double b) { return ge(a, detail::scalar_like(b, a)); }

}  // namespace loom
