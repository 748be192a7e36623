#include "autograd/graph_task.h"

#include "tensor/backend.h"
#include "tensor/creation.h"

namespace loom::autograd::detail {

thread_local GraphTask* GraphTask::current_ = nullptr;

class GraphTask::AsCurrent {
 public:
  explicit AsCurrent(GraphTask* task) : outer_(current_) {
    task->outer_ = outer_;
    current_ = task;
  }
  ~AsCurrent() { current_ = outer_; }

 private:
  GraphTask* outer_;
};

namespace {

Tensor root_gradient(const Tensor& root, const TensorList& grad_roots, size_t i) {
  if (i < grad_roots.size() && grad_roots[i].defined()) {
    const Tensor& g = grad_roots[i];
    LOOM_CHECK(g.shape() == root.shape() && g.dtype() == root.dtype() && g.device() == root.device(),
               "backward: the gradient for output ", i, " has shape ", g.shape(), " ", g.dtype(),
               " on ", g.device(), ", but the output has shape ", root.shape(), " ", root.dtype(),
               " on ", root.device());
    return g;
  }
  LOOM_CHECK(root.numel() == 1, "backward: output ", i, " has shape ", root.shape(),
             "; a gradient can be created implicitly only for a single-element output, so pass "
             "one (for example backward(ones_like(y)))");
  return ones_like(root);
}

}  // namespace

void GraphTask::add_roots(const TensorList& roots, const TensorList& grad_roots) {
  LOOM_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got ",
             grad_roots.size(), " gradients for ", roots.size(), " outputs");
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    LOOM_CHECK(root.defined(), "backward: output ", i, " is undefined");
    LOOM_CHECK(root.requires_grad(), "backward: output ", i, " (shape ", root.shape(),
               ") does not require grad and has no grad_fn: nothing it was computed from "
               "requires grad, or it was computed under NoGradGuard");
    add_root(gradient_edge(root), root_gradient(root, grad_roots, i));
  }
}

void GraphTask::add_root(const Edge& edge, const Tensor& grad) {
  roots_.push_back(edge.node);
  send(edge, grad, "the root gradient");
}

void GraphTask::split_towards(const TensorList& inputs) {
  split_ = true;
  for (const Tensor& input : inputs)
    if (input.defined() && input.requires_grad()) {
      target_edges_.push_back(gradient_edge(input));
      targets_.insert(target_edges_.back().node.get());
    }
}

void GraphTask::queue(std::function<void()> callback) {
  if (callbacks_to_outer_ && outer_)
    outer_->queue(std::move(callback));
  else
    callbacks_.push_back(std::move(callback));
}

void GraphTask::run() {
  AsCurrent as_current(this);
  count_dependencies();
  if (split_) mark_paths_to_targets();
  first_phase_ = split_;
  std::unordered_set<Node*> seen;
  for (const auto& root : roots_)
    if (dependencies_[root.get()] == 0 && seen.insert(root.get()).second) make_ready(root.get());
  captured_.assign(captures_.size(), Tensor());
  drain();
  if (!split_) run_callbacks();
}

void GraphTask::run_rest() {
  LOOM_INTERNAL_ASSERT(split_ && first_phase_, "run_rest: not a split backward's first phase");
  AsCurrent as_current(this);
  first_phase_ = false;
  for (Node* node : later_) ready_.push(node);
  later_.clear();
  for (Parked& parked : parked_) {
    TensorList outputs;
    {
      NoGradGuard no_grad;
      outputs = parked.node->apply_selected(std::move(parked.grad_outputs), parked.rest);
    }
    if (!retain_graph_) parked.node->release_saved();
    dispatch(parked.node, outputs, parked.rest);
  }
  parked_.clear();
  drain();
  for (auto& nested : nested_) nested->run_rest();
  nested_.clear();
  run_callbacks();
}

void GraphTask::drain() {
  while (!ready_.empty()) {
    Node* node = ready_.top();
    ready_.pop();
    execute(node);
  }
}

void GraphTask::run_callbacks() {
  // Callbacks may queue more callbacks.
  for (size_t i = 0; i < callbacks_.size(); ++i) {
    std::function<void()> callback = std::move(callbacks_[i]);
    callback();
  }
}

void GraphTask::count_dependencies() {
  std::vector<Node*> stack;
  std::unordered_set<Node*> visited;
  for (const auto& root : roots_)
    if (visited.insert(root.get()).second) stack.push_back(root.get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      ++dependencies_[edge.node.get()];
      if (visited.insert(edge.node.get()).second) stack.push_back(edge.node.get());
    }
  }
}

// A node is on a target's path if it is a target or one of its edges leads
// to a node that is: a depth-first walk that decides each node after all of
// the nodes its edges lead to.
void GraphTask::mark_paths_to_targets() {
  std::vector<std::pair<Node*, size_t>> stack;  // a node and its next edge to walk
  std::unordered_set<Node*> entered;
  for (const auto& root : roots_)
    if (entered.insert(root.get()).second) stack.push_back({root.get(), 0});
  while (!stack.empty()) {
    Node* node = stack.back().first;
    const auto& edges = node->next_edges();
    if (stack.back().second < edges.size()) {
      Node* next = edges[stack.back().second++].node.get();
      if (next && entered.insert(next).second) stack.push_back({next, 0});
      continue;
    }
    bool on_path = targets_.count(node) > 0;
    for (const Edge& edge : edges) on_path |= edge.valid() && on_target_path(edge.node.get());
    if (on_path) on_target_path_.insert(node);
    stack.pop_back();
  }
}

void GraphTask::make_ready(Node* node) {
  if (first_phase_ && !on_target_path(node))
    later_.push_back(node);
  else
    ready_.push(node);
}

void GraphTask::execute(Node* node) {
  TensorList grad_outputs = std::move(buffers_[node]);
  buffers_.erase(node);
  grad_outputs.resize(node->num_outputs());
  for (size_t c = 0; c < captures_.size(); ++c)
    if (captures_[c].node.get() == node) captured_[c] = grad_outputs[captures_[c].input_nr];

  bool any_gradient = false;
  for (const Tensor& g : grad_outputs) any_gradient |= g.defined();
  const bool is_leaf_sink = dynamic_cast<AccumulateGrad*>(node) != nullptr;
  const bool runs = any_gradient && (accumulate_ || !is_leaf_sink);

  // In a split's first phase, a selective node with edges off the targets'
  // paths computes the gradients along the paths now and is parked to
  // compute the others in the second phase.
  InputMask now;  // empty: all
  bool parks = false;
  if (first_phase_ && runs && node->selective()) {
    const auto& edges = node->next_edges();
    InputMask rest(edges.size());
    now.resize(edges.size());
    for (size_t i = 0; i < edges.size(); ++i) {
      now[i] = edges[i].valid() && on_target_path(edges[i].node.get());
      rest[i] = edges[i].valid() && !now[i];
      parks |= rest[i];
    }
    if (parks)
      parked_.push_back({node, grad_outputs, std::move(rest)});
    else
      now.clear();
  }

  TensorList outputs;
  if (runs) {
    NoGradGuard no_grad;  // backward functions use ops that must not record
    outputs = node->apply_selected(std::move(grad_outputs), now);
    LOOM_INTERNAL_ASSERT(is_leaf_sink || outputs.size() == node->next_edges().size(), node->name(),
                         " returned ", outputs.size(), " gradients for ", node->next_edges().size(), " inputs");
  }
  if (!retain_graph_ && !parks) node->release_saved();
  dispatch(node, outputs, now);
}

void GraphTask::dispatch(Node* node, const TensorList& outputs, const InputMask& mask) {
  const auto& edges = node->next_edges();
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& edge = edges[i];
    if (!edge.valid() || !wants(mask, i)) continue;
    if (i < outputs.size() && outputs[i].defined()) send(edge, outputs[i], node->name());
    if (--dependencies_[edge.node.get()] == 0) make_ready(edge.node.get());
  }
}

// Adds `grad` into input `edge.input_nr` of `edge.node`'s buffer.
void GraphTask::send(const Edge& edge, const Tensor& grad, const char* from) {
  const GradSpec& spec = edge.node->output_spec(edge.input_nr);
  LOOM_CHECK(grad.shape() == spec.shape && grad.dtype() == spec.dtype && grad.device() == spec.device,
             "backward: ", from, " produced a gradient of shape ", grad.shape(), " ", grad.dtype(), " on ",
             grad.device(), " for ", edge.node->name(), ", which expects shape ", spec.shape, " ", spec.dtype,
             " on ", spec.device);
  TensorList& buffer = buffers_[edge.node.get()];
  buffer.resize(edge.node->num_outputs());
  Tensor& slot = buffer[edge.input_nr];
  if (!slot.defined()) {
    slot = grad;
  } else {  // a tensor used twice: gradients add up
    Tensor sum = empty(spec.shape, {.dtype = spec.dtype, .device = spec.device});
    backend_for(spec.device).binary(BinaryOp::Add, slot, grad, sum, 1.0);
    slot = sum;
  }
}

}  // namespace loom::autograd::detail
