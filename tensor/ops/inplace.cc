// In-place ops: they write into `self`, bump its version, and are never
// recorded by autograd (optimizers and buffer updates run them under
// NoGradGuard). Writing into a tensor that requires grad while grad mode is
// on is an error rather than a silently wrong gradient.
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

// `other` as the kernel may read it while writing self: in self's dtype,
// broadcast to self's shape, and copied first if it overlaps self's memory
// in a different layout (x.add_(x.t())).
Tensor operand_for(const char* op, const Tensor& self, const Tensor& other) {
  detail::check_same_device(op, self, other);
  LOOM_CHECK(broadcasts_to(other.shape(), self.shape()), op, ": an operand of shape ",
             other.shape(), " does not broadcast to the shape ", self.shape(), " being written");
  LOOM_CHECK(is_floating(self.dtype()) || !is_floating(other.dtype()), op, ": cannot write a ",
             other.dtype(), " result into a ", self.dtype(), " tensor");
  Tensor o = other;
  const bool same_layout = o.storage_offset() == self.storage_offset() && o.strides() == self.strides() &&
                           o.shape() == self.shape();
  if (o.storage() == self.storage() && !same_layout) o = contiguous_copy(o);
  return detail::expand_raw(detail::cast_raw(o, self.dtype()), self.shape());
}

const Tensor& finish(const Tensor& self) {
  self.storage()->bump_version();
  return self;
}

const Tensor& inplace_binary(const char* op, BinaryOp kind, const Tensor& self, const Tensor& other, double alpha) {
  detail::check_inplace(op, self, {other});
  Tensor o = operand_for(op, self, other);
  if (self.numel() > 0) backend_for(self.device()).binary(kind, self, o, self, alpha);
  return finish(self);
}

const Tensor& inplace_ternary(const char* op, TernaryOp kind, const Tensor& self, const Tensor& a, const Tensor& b,
                        double value) {
  detail::check_inplace(op, self, {a, b});
  detail::check_floating(op, self);
  Tensor x = operand_for(op, self, a), y = operand_for(op, self, b);
  if (self.numel() > 0) backend_for(self.device()).ternary(kind, self, x, y, self, value);
  return finish(self);
}

// A scalar operand; a fractional one next to an integer tensor is float32,
// so that writing it back is the "cannot write a float32 result" error.
Tensor scalar_for(const Tensor& self, double value) { return detail::scalar_like(value, self); }

}  // namespace

const Tensor& Tensor::add_(const Tensor& other, double alpha) const { return inplace_binary("add_", BinaryOp::Add, *this, other, alpha); }
const Tensor& Tensor::add_(double value) const { return inplace_binary("add_", BinaryOp::Add, *this, scalar_for(*this, value), 1); }
const Tensor& Tensor::sub_(const Tensor& other, double alpha) const { return inplace_binary("sub_", BinaryOp::Sub, *this, other, alpha); }
const Tensor& Tensor::mul_(const Tensor& other) const { return inplace_binary("mul_", BinaryOp::Mul, *this, other, 1); }
const Tensor& Tensor::mul_(double value) const { return inplace_binary("mul_", BinaryOp::Mul, *this, scalar_for(*this, value), 1); }

const Tensor& Tensor::div_(const Tensor& other) const {
  detail::check_floating("div_", *this);
  return inplace_binary("div_", BinaryOp::Div, *this, other, 1);
}

const Tensor& Tensor::div_(double value) const {
  detail::check_floating("div_", *this);
  return inplace_binary("div_", BinaryOp::Div, *this, scalar_for(*this, value), 1);
}

const Tensor& Tensor::lerp_(const Tensor& end, double weight) const {
  detail::check_floating("lerp_", *this);
  return inplace_binary("lerp_", BinaryOp::Lerp, *this, end, weight);
}

const Tensor& Tensor::addcmul_(const Tensor& a, const Tensor& b, double value) const {
  return inplace_ternary("addcmul_", TernaryOp::Addcmul, *this, a, b, value);
}

const Tensor& Tensor::addcdiv_(const Tensor& a, const Tensor& b, double value) const {
  return inplace_ternary("addcdiv_", TernaryOp::Addcdiv, *this, a, b, value);
}

const Tensor& Tensor::clamp_(double min, double max) const {
  detail::check_inplace("clamp_", *this);
  LOOM_CHECK(min <= max, "clamp_: min ", min, " is above max ", max);
  if (numel() > 0) backend_for(device()).unary(UnaryOp::Clamp, *this, *this, min, max);
  return finish(*this);
}

const Tensor& Tensor::sqrt_() const {
  detail::check_inplace("sqrt_", *this);
  detail::check_floating("sqrt_", *this);
  if (numel() > 0) backend_for(device()).unary(UnaryOp::Sqrt, *this, *this, 0, 0);
  return finish(*this);
}

const Tensor& Tensor::fill_(double value) const {
  detail::check_inplace("fill_", *this);
  if (numel() > 0) backend_for(device()).fill(*this, value);
  return finish(*this);
}

const Tensor& Tensor::zero_() const { return fill_(0); }

const Tensor& Tensor::copy_(const Tensor& src) const {
  detail::check_inplace("copy_", *this, {src});
  detail::check_defined("copy_", src);
  LOOM_CHECK(broadcasts_to(src.shape(), shape()), "copy_: source of shape ",
             src.shape(), " does not broadcast to the destination's shape ", shape());
  Tensor s = src;
  if (s.device() == device() && s.storage() == storage()) s = contiguous_copy(s);
  copy_data(detail::expand_raw(s, shape()), *this);
  return finish(*this);
}

const Tensor& Tensor::masked_fill_(const Tensor& mask, double value) const {
  detail::check_inplace("masked_fill_", *this, {mask});
  detail::check_same_device("masked_fill_", *this, mask);
  LOOM_CHECK(mask.dtype() == kBool, "masked_fill_: the mask must be bool, got ", mask.dtype());
  LOOM_CHECK(broadcasts_to(mask.shape(), shape()), "masked_fill_: mask of shape ",
             mask.shape(), " does not broadcast to ", shape());
  if (numel() > 0)
    backend_for(device()).ternary(TernaryOp::Where, detail::expand_raw(mask, shape()),
                                  detail::expand_raw(scalar_tensor(value, options()), shape()), *this, *this, 0);
  return finish(*this);
}

}  // namespace loom
