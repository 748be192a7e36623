#include "autograd/split_backward.h"

#include "autograd/graph_task.h"
#include "tensor/autocast.h"

namespace loom::autograd {

WeightGradients::WeightGradients() = default;
WeightGradients::WeightGradients(WeightGradients&&) noexcept = default;
WeightGradients& WeightGradients::operator=(WeightGradients&&) noexcept = default;
WeightGradients::~WeightGradients() = default;

void WeightGradients::compute() {
  LOOM_CHECK(task_ != nullptr, "WeightGradients::compute: nothing to compute (computed already, or moved from)");
  AutocastGuard no_autocast(std::nullopt);  // gradients take their forward's dtypes
  std::unique_ptr<detail::GraphTask> task = std::move(task_);
  task->run_rest();
}

WeightGradients backward_inputs_first(const TensorList& roots, const TensorList& grad_roots,
                                      const TensorList& inputs) {
  AutocastGuard no_autocast(std::nullopt);
  for (size_t i = 0; i < inputs.size(); ++i)
    LOOM_CHECK(inputs[i].defined() && inputs[i].requires_grad() && inputs[i].is_leaf(),
               "backward_inputs_first: input ", i, " must be a leaf that requires grad (a stage's received "
               "activation, made with detach().requires_grad_())");
  WeightGradients rest;
  rest.task_ = std::make_unique<detail::GraphTask>(/*retain_graph=*/false, /*accumulate=*/true);
  rest.task_->add_roots(roots, grad_roots);
  rest.task_->split_towards(inputs);
  rest.task_->run();
  return rest;
}

}  // namespace loom::autograd
