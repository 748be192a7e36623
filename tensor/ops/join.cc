// Joining and splitting along a dim: cat (one copy per input into slices of
// the output), stack, split, unbind and chunk (views).
#include <algorithm>
#include <utility>
#include <vector>

#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {

Tensor cat(const TensorList& tensors, int64_t dim_in) {
  LOOM_CHECK(!tensors.empty(), "cat: expected at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined("cat", first);
  const int dim = wrap_dim(dim_in, first.dim(), "cat");
  LOOM_CHECK(first.dim() > 0, "cat: zero-dimensional tensors cannot be concatenated; use stack");
  Shape shape = first.shape();
  shape[dim] = 0;
  DType dtype = first.dtype();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device("cat", first, t);
    LOOM_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " has shape ", t.shape(),
               ", expected ", first.dim(), " dimensions like tensor 0's ", first.shape());
    for (int d = 0; d < t.dim(); ++d)
      LOOM_CHECK(d == dim || t.size(d) == first.size(d), "cat: tensor ", i, " has shape ", t.shape(),
                 ", which differs from tensor 0's ", first.shape(), " outside dimension ", dim);
    shape[dim] += t.size(dim);
    dtype = promote_types(dtype, t.dtype());
  }
  Tensor y = empty(shape, {.dtype = dtype, .device = first.device()});
  std::vector<int64_t> sizes;
  std::vector<DType> dtypes;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    copy_data(t, as_strided(y, t.shape(), y.strides(), y.storage_offset() + offset * y.stride(dim)));
    offset += t.size(dim);
    sizes.push_back(t.size(dim));
    dtypes.push_back(t.dtype());
  }
  if (autograd::needs_grad(tensors))
    autograd::record("CatBackward", tensors, y, [sizes, dtypes, dim](const TensorList& g) {
      TensorList grads = split(g[0], sizes, dim);
      for (size_t i = 0; i < grads.size(); ++i)
        if (grads[i].dtype() != dtypes[i]) grads[i] = grads[i].to(dtypes[i]);
      return grads;
    });
  return y;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  LOOM_CHECK(!tensors.empty(), "stack: expected at least one tensor");
  const int d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  TensorList expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    LOOM_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: tensor ", i, " has shape ",
               tensors[i].shape(), " but tensor 0 has shape ", tensors[0].shape());
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

namespace {

// Whether a layout reaches no element twice: walked from the smallest
// stride, each dim steps past everything the smaller ones span. (Enough, not
// necessary; the layouts that reach here are permuted dense ones.)
bool non_overlapping(const Shape& shape, const Strides& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] != 1) dims.emplace_back(strides[d], shape[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;  // one past the furthest element the dims so far reach
  for (const auto& [stride, size] : dims) {
    if (stride < span) return false;
    span = stride * (size - 1) + span;
  }
  return true;
}

// The parts' gradients as one view of shape `whole`, when they already lie
// side by side along `dim` in one buffer, each where cat would put it (the
// fused attention's backward writes dq, dk and dv so, for q, k and v split
// from one projection); else undefined.
Tensor side_by_side(const TensorList& grads, int dim, const Shape& whole, DType dtype) {
  const Tensor& first = grads[0];
  if (!first.defined()) return {};
  int64_t offset = first.storage_offset();
  for (const Tensor& g : grads) {
    if (!g.defined() || g.storage() != first.storage() || g.strides() != first.strides() || g.dtype() != dtype ||
        g.storage_offset() != offset)
      return {};
    offset += g.size(dim) * first.stride(dim);
  }
  if (!non_overlapping(whole, first.strides())) return {};
  return as_strided(first, whole, first.strides(), first.storage_offset());
}

}  // namespace

// The parts are views; one node records all of them, so that the backward
// is a single cat instead of one full-size zero tensor per part, and no copy
// at all when their gradients arrive side by side in one buffer.
TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_in) {
  const int dim = wrap_dim(dim_in, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    LOOM_CHECK(s >= 0, "split: negative size ", s);
    total += s;
  }
  LOOM_CHECK(total == x.size(dim), "split: sizes ", Shape(sizes), " add up to ", total,
             ", but dimension ", dim, " has size ", x.size(dim));
  TensorList parts;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    Shape shape = x.shape();
    shape[dim] = s;
    parts.push_back(as_strided(x, shape, x.strides(), x.storage_offset() + offset * x.stride(dim)));
    offset += s;
  }
  if (autograd::needs_grad(x))
    autograd::record("SplitBackward", {x}, parts, [sizes, dim, shape = x.shape(), options = x.options()](const TensorList& g) {
      if (Tensor whole = side_by_side(g, dim, shape, options.dtype); whole.defined()) return TensorList{whole};
      TensorList filled;  // parts that got no gradient contribute zeros
      for (size_t i = 0; i < g.size(); ++i) {
        Shape part = shape;
        part[dim] = sizes[i];
        filled.push_back(g[i].defined() ? g[i] : zeros(part, options));
      }
      return TensorList{cat(filled, dim)};
    });
  return parts;
}

TensorList unbind(const Tensor& x, int64_t dim_in) {
  const int dim = wrap_dim(dim_in, x.dim(), "unbind");
  Shape shape = x.shape();
  Strides strides = x.strides();
  shape.erase(dim);
  strides.erase(dim);
  TensorList parts;
  for (int64_t i = 0; i < x.size(dim); ++i)
    parts.push_back(as_strided(x, shape, strides, x.storage_offset() + i * x.stride(dim)));
  if (autograd::needs_grad(x))
    autograd::record("UnbindBackward", {x}, parts, [dim, shape, options = x.options()](const TensorList& g) {
      TensorList filled;
      for (const Tensor& part : g) filled.push_back(part.defined() ? part : zeros(shape, options));
      return TensorList{stack(filled, dim)};
    });
  return parts;
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim_in) {
  LOOM_CHECK(split_size > 0, "split: split_size must be positive, got ", split_size);
  const int dim = wrap_dim(dim_in, x.dim(), "split");
  std::vector<int64_t> sizes;
  for (int64_t left = x.size(dim); left > 0; left -= split_size) sizes.push_back(std::min(left, split_size));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  LOOM_CHECK(chunks > 0, "chunk: chunks must be positive, got ", chunks);
  const int64_t n = x.size(dim);
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace loom
