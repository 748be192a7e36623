#include "parallel/tensor_parallel/collectives_along.h"

#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/error.h"
#include "tensor/ops.h"
#include "tensor/shape.h"

namespace loom::parallel {

namespace {

// The order of dims that moves dim `from` to place `to` (the others keep theirs).
std::vector<int64_t> moved(int64_t rank, int64_t from, int64_t to) {
  std::vector<int64_t> order;
  for (int64_t d = 0; d < rank; ++d)
    if (d != from) order.push_back(d);
  order.insert(order.begin() + to, from);
  return order;
}

}  // namespace

Tensor all_reduced(const Tensor& x, ProcessGroup& group) {
  NoGradGuard no_grad;
  Tensor sum = x.contiguous().clone();
  group.all_reduce(sum, ReduceOp::Sum)->wait();
  return sum;
}

// The collective lays the pieces one after another, (N, ...x's shape); one copy moves N
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

// One copy puts the pieces one after another, as the collective
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

}  // namespace loom::parallel
