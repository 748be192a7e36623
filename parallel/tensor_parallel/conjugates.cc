#include "parallel/tensor_parallel/conjugates.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace loom::parallel {

namespace {

// The sum over the ranks, in a tensor of its own.
Tensor all_reduced(const Tensor& x, ProcessGroup& group) {
  NoGradGuard no_grad;
  Tensor sum = x.contiguous().clone();
  group.all_reduce(sum, ReduceOp::Sum)->wait();
  return sum;
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
  const int n = group->size(), rank = group->rank();
  const int64_t width = x.size(-1);
  Tensor y;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> pieces;
    for (int r = 0; r < n; ++r) pieces.push_back(empty(x.shape(), x.options()));
    group->all_gather(pieces, x.contiguous())->wait();
    y = cat(pieces, x.dim() - 1);
  }
  if (autograd::needs_grad(x))
    autograd::record("GatherFromTensorParallel", {x}, y, [rank, width](const TensorList& grads) {
      return TensorList{grads[0].narrow(grads[0].dim() - 1, rank * width, width).contiguous()};
    });
  return y;
}

}  // namespace loom::parallel
