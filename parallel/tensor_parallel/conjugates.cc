#include "parallel/tensor_parallel/conjugates.h"

#include "autograd/node.h"
#include "parallel/tensor_parallel/collectives_along.h"

namespace loom::parallel {

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

}  // namespace loom::parallel
