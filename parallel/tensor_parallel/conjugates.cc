#include "parallel/tensor_parallel/conjugates.h"

#include "autograd/grad_mode.h"
#include "parallel/trace.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace loom::parallel {

namespace {

// A finished collective as a span on the rank's communication lane.
void trace_span(const char* name, const ProcessGroup& group, int64_t issued_us, const Work& work) {
  if (!trace::enabled()) return;
  trace::record(name, "communication", trace::lane("rank" + std::to_string(group.rank()) + "/comm"), issued_us,
                trace::to_us(work.completed_at()));
}

// The sum over the ranks, in a tensor of its own.
Tensor all_reduced(const Tensor& x, ProcessGroup& group, const char* name) {
  NoGradGuard no_grad;
  Tensor sum = x.contiguous().clone();
  const int64_t issued = trace::now_us();
  WorkPtr work = group.all_reduce(sum, ReduceOp::Sum);
  work->wait();
  trace_span(name, group, issued, *work);
  return sum;
}

}  // namespace

Tensor copy_to_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  Tensor y = x.detach();
  if (autograd::needs_grad(x))
    autograd::record("CopyToTensorParallel", {x}, y, [group](const TensorList& grads) {
      return TensorList{all_reduced(grads[0], *group, "all_reduce (f, backward)")};
    });
  return y;
}

Tensor reduce_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group) {
  Tensor y = all_reduced(x, *group, "all_reduce (g, forward)");
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
    const int64_t issued = trace::now_us();
    WorkPtr work = group->all_gather(pieces, x.contiguous());
    work->wait();
    trace_span("all_gather (logits)", *group, issued, *work);
    y = cat(pieces, x.dim() - 1);
  }
  if (autograd::needs_grad(x))
    autograd::record("GatherFromTensorParallel", {x}, y, [rank, width](const TensorList& grads) {
      return TensorList{grads[0].narrow(grads[0].dim() - 1, rank * width, width).contiguous()};
    });
  return y;
}

}  // namespace loom::parallel
