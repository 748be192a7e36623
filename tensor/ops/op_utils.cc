#include "tensor/ops/op_utils.h"

#include <algorithm>
#include <cmath>

#include "tensor/ops.h"

namespace loom::detail {

void check_defined(const char* op, const Tensor& t) {
  LOOM_CHECK(t.defined(), op, ": got an undefined tensor");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  LOOM_CHECK(a.device() == b.device(), op, ": expected all tensors on the same device, got ",
             a.device(), " and ", b.device());
}

void check_floating(const char* op, const Tensor& t) {
  LOOM_CHECK(is_floating(t.dtype()), op, ": expected a floating-point tensor, got ", t.dtype());
}

void check_inplace(const char* op, const Tensor& self, const TensorList& others) {
  check_defined(op, self);
  bool recorded = self.requires_grad();
  for (const Tensor& t : others) recorded |= t.defined() && t.requires_grad();
  LOOM_CHECK(!autograd::grad_enabled() || !recorded, op,
             ": in-place operations on tensors that require grad are not recorded by autograd; "
             "use the out-of-place op, or do the update under NoGradGuard (as optimizers do)");
  for (int d = 0; d < self.dim(); ++d)
    LOOM_CHECK(self.stride(d) != 0 || self.size(d) <= 1, op,
               ": cannot write in place into a tensor whose elements share memory (an "
               "expand()ed view of shape ", self.shape(), "); clone() it first");
}

Tensor expand_raw(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  const int n = shape.size(), lead = n - t.dim();
  LOOM_INTERNAL_ASSERT(lead >= 0);
  Strides strides = Dims::filled(n, 0);
  for (int d = 0; d < t.dim(); ++d) {
    LOOM_INTERNAL_ASSERT(t.size(d) == shape[lead + d] || t.size(d) == 1);
    strides[lead + d] = t.size(d) == 1 && shape[lead + d] != 1 ? 0 : t.stride(d);
  }
  return as_strided(t, shape, strides, t.storage_offset());
}

Tensor cast_raw(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), {.dtype = dtype, .device = t.device()});
  backend_for(t.device()).copy(t, out);
  return out;
}

Tensor view_raw(const Tensor& t, const Shape& shape) {
  LOOM_INTERNAL_ASSERT(t.is_contiguous() && numel(shape) == t.numel());
  return as_strided(t, shape, contiguous_strides(shape), t.storage_offset());
}

DType scalar_dtype(DType dtype, double value) {
  if (is_floating(dtype)) return dtype;
  if (std::floor(value) != value) return kFloat32;
  return dtype == kBool ? kInt64 : dtype;
}

Tensor scalar_like(double value, const Tensor& like) {
  return scalar_tensor(value, {.dtype = scalar_dtype(like.dtype(), value), .device = like.device()});
}

Tensor sum_to(const Tensor& grad, const Shape& shape, DType dtype) {
  Tensor g = grad;
  if (g.shape() != shape) {
    const int lead = g.dim() - shape.size();
    std::vector<int64_t> dims;
    for (int d = 0; d < g.dim(); ++d)
      if (d < lead || (shape[d - lead] == 1 && g.size(d) != 1)) dims.push_back(d);
    if (!dims.empty()) g = sum(g, dims, /*keepdim=*/true);
    g = g.reshape(shape.vec());
  }
  return g.dtype() == dtype ? g : g.to(dtype);
}

std::vector<int> reduction_dims(const std::vector<int64_t>& dims, int ndim, const char* op) {
  std::vector<int> out;
  if (dims.empty()) {
    for (int d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, op));
  std::sort(out.begin(), out.end());
  LOOM_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), op, ": dimension ",
             *std::adjacent_find(out.begin(), out.end()), " appears twice in the reduction dims");
  return out;
}

}  // namespace loom::detail
