// The public entry points of the backward engine (graph_task.h runs it).
#include "autograd/engine.h"

#include <memory>

#include "autograd/graph_task.h"
#include "tensor/autocast.h"

namespace loom::autograd {

using detail::GraphTask;

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph) {
  AutocastGuard no_autocast(std::nullopt);  // gradients take their forward's dtypes
  GraphTask task(retain_graph, /*accumulate=*/true);
  task.add_roots(roots, grad_roots);
  task.run();
}

void backward_nested(const TensorList& roots, const TensorList& grad_roots, const TensorList& inputs) {
  AutocastGuard no_autocast(std::nullopt);
  auto task = std::make_unique<GraphTask>(/*retain_graph=*/false, /*accumulate=*/true);
  task->send_callbacks_to_outer();
  task->add_roots(roots, grad_roots);
  GraphTask* outer = GraphTask::current_;
  if (outer == nullptr || !outer->in_first_phase()) {
    task->run();
    return;
  }
  task->split_towards(inputs);
  task->run();
  outer->run_rest_with_mine(std::move(task));
}

void queue_callback(std::function<void()> callback) {
  LOOM_CHECK(GraphTask::current_ != nullptr, "queue_callback: no backward is running on this thread");
  GraphTask::current_->queue(std::move(callback));
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs,
                bool retain_graph) {
  AutocastGuard no_autocast(std::nullopt);
  GraphTask task(retain_graph, /*accumulate=*/false);
  for (size_t i = 0; i < inputs.size(); ++i) {
    LOOM_CHECK(inputs[i].requires_grad(), "grad: input ", i, " does not require grad");
    task.capture(gradient_edge(inputs[i]));
  }
  task.add_roots(outputs, grad_outputs);
  task.run();
  return task.captured();
}

}  // namespace loom::autograd
