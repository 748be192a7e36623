// Helpers shared by the op files: argument checks, raw (unrecorded) views and
// casts, and reducing a broadcast gradient back to its input's shape.
#pragma once

#include <vector>

#include "autograd/node.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/tensor.h"

namespace loom::detail {

void check_defined(const char* op, const Tensor& t);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_floating(const char* op, const Tensor& t);
// In-place ops write into `self`: it must not need recording, and must not be
// a view whose elements overlap in memory (an expand()ed tensor).
void check_inplace(const char* op, const Tensor& self, const TensorList& others = {});

// A view of t broadcast to `shape` (stride 0 on new or size-1 dims); no autograd.
Tensor expand_raw(const Tensor& t, const Shape& shape);
// t in `dtype` (t itself if it already is); no autograd.
Tensor cast_raw(const Tensor& t, DType dtype);
// A view with a new shape of a contiguous tensor; no autograd.
Tensor view_raw(const Tensor& t, const Shape& shape);

// The dtype a scalar operand takes next to a tensor of `dtype`: the tensor's,
// unless a fractional scalar meets an integer tensor (then float32).
DType scalar_dtype(DType dtype, double value);
Tensor scalar_like(double value, const Tensor& like);

// Sums a gradient over the dims that broadcasting added or expanded, so that
// it has `shape` again, and casts it to `dtype`.
Tensor sum_to(const Tensor& grad, const Shape& shape, DType dtype);
// Shorthand: the gradient for `input` from a broadcast result's gradient.
inline Tensor grad_for(const Tensor& grad, const Tensor& input) {
  return sum_to(grad, input.shape(), input.dtype());
}

// Sorted, unique, wrapped dims; all dims when `dims` is empty.
std::vector<int> reduction_dims(const std::vector<int64_t>& dims, int ndim, const char* op);

}  // namespace loom::detail
