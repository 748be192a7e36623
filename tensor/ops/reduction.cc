// Reductions over any set of dims (sum, mean, amax, amin, var), argmax and
// argmin, and their gradients.
#include "tensor/autocast.h"
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

using autograd::SavedTensor;

Shape keepdim_shape(const Shape& shape, const std::vector<int>& dims) {
  Shape out = shape;
  for (int d : dims) out[d] = 1;
  return out;
}

Shape reduced_shape(const Shape& shape, const std::vector<int>& dims, bool keepdim) {
  if (keepdim) return keepdim_shape(shape, dims);
  Shape out;
  for (int d = 0, k = 0; d < shape.size(); ++d) {
    if (k < static_cast<int>(dims.size()) && dims[k] == d) {
      ++k;
      continue;
    }
    out.push_back(shape[d]);
  }
  return out;
}

int64_t reduced_count(const Shape& shape, const std::vector<int>& dims) {
  int64_t n = 1;
  for (int d : dims) n *= shape[d];
  return n;
}

// The reduction kernel into a keepdim-shaped output, viewed as `keepdim` asks.
Tensor reduce_forward(ReduceOp kind, const Tensor& x, const std::vector<int>& dims, bool keepdim,
                      DType dtype) {
  Tensor out = empty(keepdim_shape(x.shape(), dims), {.dtype = dtype, .device = x.device()});
  if (out.numel() > 0) backend_for(x.device()).reduce(kind, detail::cast_raw(x, dtype), out);
  return keepdim ? out : detail::view_raw(out, reduced_shape(x.shape(), dims, false));
}

void check_nonempty(const char* op, const Tensor& x, const std::vector<int>& dims) {
  for (int d : dims)
    LOOM_CHECK(x.size(d) > 0, op, ": cannot reduce over dimension ", d, " of size 0 (shape ",
               x.shape(), "): the result has no identity value");
}

// amax / amin: the gradient is shared evenly by the elements equal to the result.
Tensor extremum(const char* op, ReduceOp kind, const Tensor& x, const std::vector<int64_t>& dims_in,
                bool keepdim) {
  detail::check_defined(op, x);
  std::vector<int> dims = detail::reduction_dims(dims_in, x.dim(), op);
  check_nonempty(op, x, dims);
  LOOM_CHECK(x.dtype() != kBool, op, ": not supported for bool tensors");
  Tensor y = reduce_forward(kind, x, dims, keepdim, x.dtype());
  if (autograd::needs_grad(x)) {
    Shape keep = keepdim_shape(x.shape(), dims);
    std::vector<int64_t> dims64(dims.begin(), dims.end());
    autograd::record(kind == ReduceOp::Max ? "AmaxBackward" : "AminBackward", {x}, y,
                     [sx = SavedTensor(x), sy = SavedTensor(y), keep, dims64](const TensorList& g) {
                       Tensor winners = (sx.get() == sy.get().reshape(keep.vec())).to(g[0].dtype());
                       Tensor share = winners / sum(winners, dims64, /*keepdim=*/true);
                       return TensorList{g[0].reshape(keep.vec()) * share};
                     });
  }
  return y;
}

Tensor arg_extremum(const char* op, ArgReduceOp kind, const Tensor& x, int64_t dim_in, bool keepdim) {
  detail::check_defined(op, x);
  int dim = wrap_dim(dim_in, x.dim(), op);
  if (x.dim() == 0) return zeros({}, {.dtype = kInt64, .device = x.device()});
  check_nonempty(op, x, {dim});
  LOOM_CHECK(x.dtype() != kBool, op, ": not supported for bool tensors");
  Tensor out = empty(keepdim_shape(x.shape(), {dim}), {.dtype = kInt64, .device = x.device()});
  if (out.numel() > 0) backend_for(x.device()).arg_reduce(kind, x, dim, out);
  return keepdim ? out : detail::view_raw(out, reduced_shape(x.shape(), {dim}, false));
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("sum", x);
  if (autocast_wants_float32({x})) return sum(autocast_to_float32(x), dims_in, keepdim);
  std::vector<int> dims = detail::reduction_dims(dims_in, x.dim(), "sum");
  // Integers and bools sum into int64, as in PyTorch.
  DType dtype = is_floating(x.dtype()) ? x.dtype() : kInt64;
  Tensor y = reduce_forward(ReduceOp::Sum, x, dims, keepdim, dtype);
  if (autograd::needs_grad(x))
    autograd::record("SumBackward", {x}, y,
                     [shape = x.shape().vec(), keep = keepdim_shape(x.shape(), dims).vec()](const TensorList& g) {
                       return TensorList{g[0].reshape(keep).expand(shape)};
                     });
  return y;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim) {
  detail::check_defined("mean", x);
  LOOM_CHECK(is_floating(x.dtype()), "mean: expected a floating-point tensor, got ", x.dtype(),
             " (convert it with .to(kFloat32))");
  std::vector<int> dims = detail::reduction_dims(dims_in, x.dim(), "mean");
  // 16-bit floats: computed in float32 and rounded once, as PyTorch does
  // (and left in float32 under autocast).
  if (autocast_wants_float32({x})) return mean(autocast_to_float32(x), dims_in, keepdim);
  if (is_16bit_floating(x.dtype())) return mean(x.to(kFloat32), dims_in, keepdim).to(x.dtype());
  return sum(x, dims_in, keepdim) / static_cast<double>(reduced_count(x.shape(), dims));
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amax", ReduceOp::Max, x, dims, keepdim);
}

Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum("amin", ReduceOp::Min, x, dims, keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum("argmax", ArgReduceOp::ArgMax, x, dim, keepdim);
}

Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extremum("argmin", ArgReduceOp::ArgMin, x, dim, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims_in, int64_t correction, bool keepdim) {
  detail::check_defined("var", x);
  detail::check_floating("var", x);
  std::vector<int> dims = detail::reduction_dims(dims_in, x.dim(), "var");
  if (is_16bit_floating(x.dtype())) return var(x.to(kFloat32), dims_in, correction, keepdim).to(x.dtype());
  const int64_t n = reduced_count(x.shape(), dims);
  Tensor centered = x - mean(x, dims_in, /*keepdim=*/true);
  return sum(square(centered), dims_in, keepdim) / static_cast<double>(n - correction);
}

}  // namespace loom
