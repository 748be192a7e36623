// Selection and indexing: where, masked_fill, index_select / index_add,
// gather / scatter_add, and their gradients (each is the other's adjoint).
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

using autograd::SavedTensor;

Tensor contiguous_raw(const Tensor& t) { return t.is_contiguous() ? t : contiguous_copy(t); }

void check_index(const char* op, const Tensor& x, const Tensor& index) {
  detail::check_same_device(op, x, index);
  LOOM_CHECK(index.dtype() == kInt64, op, ": indices must be int64, got ", index.dtype());
}

// The shape of index_select's result: x's, with `dim` resized to `count`.
Shape with_size(const Shape& shape, int dim, int64_t count) {
  Shape out = shape;
  out[dim] = count;
  return out;
}

// x + src placed at `index` rows along `dim` (no autograd).
Tensor index_add_raw(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  Tensor out = contiguous_copy(x);
  if (src.numel() > 0) backend_for(x.device()).index_add(out, dim, contiguous_raw(index), contiguous_raw(src));
  return out;
}

Tensor scatter_add_raw(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  Tensor out = contiguous_copy(x);
  if (index.numel() > 0)
    backend_for(x.device()).scatter_add(out, dim, contiguous_raw(index), contiguous_raw(src));
  return out;
}

void check_gather_shapes(const char* op, const Tensor& x, int dim, const Tensor& index) {
  LOOM_CHECK(index.dim() == x.dim(), op, ": index has ", index.dim(), " dimensions but the tensor has ",
             x.dim(), " (shapes ", index.shape(), " and ", x.shape(), ")");
  for (int d = 0; d < x.dim(); ++d)
    LOOM_CHECK(d == dim || index.size(d) <= x.size(d), op, ": index shape ", index.shape(),
               " is larger than the tensor's shape ", x.shape(), " in dimension ", d);
}

}  // namespace

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  detail::check_same_device("where", condition, a);
  detail::check_same_device("where", a, b);
  LOOM_CHECK(condition.dtype() == kBool, "where: the condition must be bool, got ", condition.dtype());
  Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  DType dtype = promote_types(a.dtype(), b.dtype());
  Tensor y = empty(shape, {.dtype = dtype, .device = a.device()});
  if (y.numel() > 0)
    backend_for(y.device())
        .ternary(TernaryOp::Where, detail::expand_raw(condition, shape),
                 detail::expand_raw(detail::cast_raw(a, dtype), shape),
                 detail::expand_raw(detail::cast_raw(b, dtype), shape), y, 0);
  if (autograd::needs_grad(a, b))
    autograd::record("WhereBackward", {a, b}, y,
                     [c = SavedTensor(condition), sa = a.shape(), sb = b.shape(), ta = a.dtype(),
                      tb = b.dtype()](const TensorList& g) {
                       Tensor zero = zeros({}, g[0].options());
                       return TensorList{detail::sum_to(where(c.get(), g[0], zero), sa, ta),
                                         detail::sum_to(where(c.get(), zero, g[0]), sb, tb)};
                     });
  return y;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  detail::check_same_device("masked_fill", x, mask);
  LOOM_CHECK(mask.dtype() == kBool, "masked_fill: the mask must be bool, got ", mask.dtype());
  LOOM_CHECK(broadcasts_to(mask.shape(), x.shape()), "masked_fill: mask of shape ", mask.shape(),
             " does not broadcast to the tensor's shape ", x.shape());
  return where(mask, scalar_tensor(value, x.options()), x);
}

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  check_index("index_select", x, index);
  LOOM_CHECK(index.dim() <= 1, "index_select: index must be 0-D or 1-D, got shape ", index.shape());
  const int dim = wrap_dim(dim_in, x.dim(), "index_select");
  Tensor y = empty(with_size(x.shape(), dim, index.numel()), x.options());
  if (y.numel() > 0) backend_for(x.device()).index_select(contiguous_raw(x), dim, contiguous_raw(index), y);
  if (autograd::needs_grad(x))
    autograd::record("IndexSelectBackward", {x}, y,
                     [index = SavedTensor(index), shape = x.shape(), dim](const TensorList& g) {
                       return TensorList{index_add_raw(zeros(shape, g[0].options()), dim, index.get(), g[0])};
                     });
  return y;
}

Tensor index_add(const Tensor& x, int64_t dim_in, const Tensor& index, const Tensor& src) {
  check_index("index_add", x, index);
  detail::check_same_device("index_add", x, src);
  const int dim = wrap_dim(dim_in, x.dim(), "index_add");
  LOOM_CHECK(index.dim() <= 1 && src.shape() == with_size(x.shape(), dim, index.numel()),
             "index_add: src of shape ", src.shape(), " does not match the tensor's shape ", x.shape(),
             " with dimension ", dim, " resized to the ", index.numel(), " indices");
  LOOM_CHECK(src.dtype() == x.dtype(), "index_add: src is ", src.dtype(), " but the tensor is ", x.dtype());
  Tensor y = index_add_raw(x, dim, index, src);
  if (autograd::needs_grad(x, src))
    autograd::record("IndexAddBackward", {x, src}, y, [index = SavedTensor(index), dim](const TensorList& g) {
      return TensorList{g[0], index_select(g[0], dim, index.get())};
    });
  return y;
}

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  check_index("gather", x, index);
  const int dim = wrap_dim(dim_in, x.dim(), "gather");
  check_gather_shapes("gather", x, dim, index);
  Tensor y = empty(index.shape(), x.options());
  if (y.numel() > 0) backend_for(x.device()).gather(x, dim, contiguous_raw(index), y);
  if (autograd::needs_grad(x))
    autograd::record("GatherBackward", {x}, y,
                     [index = SavedTensor(index), shape = x.shape(), dim](const TensorList& g) {
                       return TensorList{scatter_add_raw(zeros(shape, g[0].options()), dim, index.get(), g[0])};
                     });
  return y;
}

Tensor scatter_add(const Tensor& x, int64_t dim_in, const Tensor& index, const Tensor& src) {
  check_index("scatter_add", x, index);
  detail::check_same_device("scatter_add", x, src);
  const int dim = wrap_dim(dim_in, x.dim(), "scatter_add");
  check_gather_shapes("scatter_add", x, dim, index);
  LOOM_CHECK(src.shape() == index.shape(), "scatter_add: src of shape ", src.shape(),
             " must have the index's shape ", index.shape());
  LOOM_CHECK(src.dtype() == x.dtype(), "scatter_add: src is ", src.dtype(), " but the tensor is ", x.dtype());
  Tensor y = scatter_add_raw(x, dim, index, src);
  if (autograd::needs_grad(x, src))
    autograd::record("ScatterAddBackward", {x, src}, y, [index = SavedTensor(index), dim](const TensorList& g) {
      return TensorList{g[0], gather(g[0], dim, index.get())};
    });
  return y;
}

}  // namespace loom
