#include "parallel/tensor_parallel/sequence_conjugates.h"

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "parallel/tensor_parallel/collectives_along.h"
#include "tensor/autocast.h"
#include "tensor/ops.h"
#include "tensor/shape.h"

namespace loom::parallel {

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
