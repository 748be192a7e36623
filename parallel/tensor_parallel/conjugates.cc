#include "parallel/tensor_parallel/conjugates.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/autocast.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tensor/shape.h"

namespace loom::parallel {

namespace {

// The sum over the ranks, in a tensor of its own.
Tensor all_reduced(const Tensor& x, ProcessGroup& group) {
  NoGradGuard no_grad;
  Tensor sum = x.contiguous().clone();
  group.all_reduce(sum, ReduceOp::Sum)->wait();
  return sum;
}

// The order of dims that moves dim `from` to place `to` (the others keep theirs).
std::vector<int64_t> moved(int64_t rank, int64_t from, int64_t to) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d)
    if (d != from) order.push_back(d);
  order.insert(order.begin() + to, from);
  return order;
}

// Every rank's `x` side by side along `dim`, in rank order. The collective
// lays the pieces one after another, (N, ...x's shape); one copy moves N
// next to `dim` and merges the two.
Tensor all_gathered(const Tensor& x, int64_t dim, ProcessGroup& group) {
  NoGradGuard no_grad;
  const Tensor piece = x.contiguous();
  Shape stacked = piece.shape();
  stacked.insert(0, group.size());
  Tensor pieces = empty(stacked, piece.options());
  group.all_gather(pieces, piece)->wait();
  Shape whole = piece.shape();
  whole[dim] *= group.size();
  return pieces.permute(moved(pieces.dim(), 0, dim)).reshape(whole.vec());
}

// The sum over the ranks of `x`, cut along `dim` into one piece per rank:
// this rank's. One copy puts the pieces one after another, as the collective
// cuts them.
Tensor reduce_scattered(const Tensor& x, int64_t dim, ProcessGroup& group) {
  NoGradGuard no_grad;
  const int64_t n = group.size();
  LOOM_CHECK(x.size(dim) % n == 0, "sequence parallel: the sequence (dim ", dim, " of ", x.shape(),
             ") does not divide by the ", n, " ranks");
  Shape split = x.shape();
  split[dim] /= n;
  Shape piece_shape = split;
  split.insert(static_cast<int>(dim), n);  // (..., N, T/N, ...)
  const Tensor pieces = x.reshape(split.vec()).permute(moved(static_cast<int64_t>(split.size()), dim, 0)).contiguous();
  Tensor piece = empty(piece_shape, x.options());
  group.reduce_scatter(piece, pieces, ReduceOp::Sum)->wait();
  return piece;
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  Tensor y = x.detach();
  if (autograd::needs_grad(x))
    autograd::record("CopyToTensorParallel", {x}, y, [group](const TensorList& grads) {
      return TensorList{all_reduced(grads[0], *group)};
    });
  return y;
}

Tensor reduce_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  Tensor y = all_reduced(x, *group);
  if (autograd::needs_grad(x))
    autograd::record("ReduceFromTensorParallel", {x}, y, [](const TensorList& grads) { return TensorList{grads[0]}; });
  return y;
}

Tensor gather_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  const int rank = group->rank();
  const int64_t width = x.size(-1);
  Tensor y = all_gathered(x, x.dim() - 1, *group);
  if (autograd::needs_grad(x))
    autograd::record("GatherFromTensorParallel", {x}, y, [rank, width](const TensorList& grads) {
      return TensorList{grads[0].narrow(grads[0].dim() - 1, rank * width, width).contiguous()};
    });
  return y;
}

Tensor gather_from_sequence_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "gather_from_sequence_parallel");
  Tensor y = all_gathered(x, dim, *group);
  if (autograd::needs_grad(x))
    autograd::record("GatherFromSequenceParallel", {x}, y, [group, dim](const TensorList& grads) {
      return TensorList{reduce_scattered(grads[0], dim, *group)};
    });
  return y;
}

Tensor reduce_scatter_to_sequence_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group,
                                           int64_t dim) {
  dim = wrap_dim(dim, x.dim(), "reduce_scatter_to_sequence_parallel");
  Tensor y = reduce_scattered(x, dim, *group);
  if (autograd::needs_grad(x))
    autograd::record("ReduceScatterToSequenceParallel", {x}, y, [group, dim](const TensorList& grads) {
      return TensorList{all_gathered(grads[0], dim, *group)};
    });
  return y;
}

Tensor gather_sequence_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::shared_ptr<ProcessGroup>& group, int64_t dim) {
  if (autocast_wants_low({x, weight, bias}))
    return gather_sequence_linear(autocast_to_low(x), autocast_to_low(weight), autocast_to_low(bias), group, dim);
  dim = wrap_dim(dim, x.dim(), "gather_sequence_linear");
  Tensor y;
  {
    NoGradGuard no_grad;
    y = nn::functional::linear(all_gathered(x, dim, *group), weight, bias);
  }
  const bool has_bias = bias.defined();
  const TensorList inputs = has_bias ? TensorList{x, weight, bias} : TensorList{x, weight};
  if (autograd::needs_grad(inputs))
    autograd::record("GatherSequenceLinear", inputs, y,
                     [x = autograd::SavedTensor(x), weight = autograd::SavedTensor(weight), group, dim,
                      has_bias](const TensorList& grads) {
                       const Tensor& dy = grads[0];
                       const Tensor all = all_gathered(x.get(), dim, *group);
                       const Tensor dy_rows = dy.reshape({-1, dy.size(-1)});
                       TensorList out{reduce_scattered(matmul(dy, weight.get()), dim, *group),
                                      matmul(dy_rows.t(), all.reshape({-1, all.size(-1)}))};
                       if (has_bias) out.push_back(sum(dy_rows, {0}));
                       return out;
                     });
  return y;
}

}  // namespace loom::parallel
