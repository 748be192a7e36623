// Copies: to another device or dtype, clone, contiguous. All differentiable.
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {

Tensor Tensor::to(Device device, DType dtype) const {
  if (device == this->device() && dtype == this->dtype()) return *this;
  LOOM_CHECK(!requires_grad() || is_floating(dtype), "to: a tensor that requires grad can only be "
             "converted to a floating-point dtype, not ", dtype);
  Tensor out = empty(shape(), {.dtype = dtype, .device = device});
  copy_data(*this, out);
  if (autograd::needs_grad(*this))
    autograd::record("ToBackward", {*this}, out,
                     [from_device = this->device(), from_dtype = this->dtype()](const TensorList& g) {
                       return TensorList{g[0].to(from_device, from_dtype)};
                     });
  return out;
}

Tensor Tensor::to(Device device) const { return to(device, dtype()); }
Tensor Tensor::to(DType dtype) const { return to(device(), dtype); }

Tensor Tensor::clone() const {
  Tensor out = contiguous_copy(*this);
  if (autograd::needs_grad(*this))
    autograd::record("CloneBackward", {*this}, out, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

}  // namespace loom
