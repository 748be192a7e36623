// The backward engine: replays the recorded tape from the roots, newest first.
//
// 1. Walk the graph from the roots and count, for each node, how many edges
//    reach it (its dependencies).
// 2. Seed the roots' gradient buffers; roots with no dependencies are ready.
// 3. Repeatedly run the ready node that is latest on the tape: sum what
//    arrived in its buffer, call its backward, send each result along its
//    edge, and make a node ready once all its dependencies have sent. A leaf's
//    AccumulateGrad is thus run the moment its gradient is final.
#include "autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tensor/autocast.h"
#include "tensor/backend.h"
#include "tensor/creation.h"

namespace loom::autograd {
namespace {

struct LatestFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

class GraphTask {
 public:
  GraphTask(bool retain_graph, bool accumulate) : retain_graph_(retain_graph), accumulate_(accumulate) {}

  void add_root(const Edge& edge, const Tensor& grad) {
    roots_.push_back(edge.node);
    send(edge, grad, "the root gradient");
  }

  // Gradients that reach `edge` are kept (for autograd::grad).
  void capture(const Edge& edge) { captures_.push_back(edge); }
  TensorList captured() const { return captured_; }

  // A nested task hands its callbacks to the task around it.
  void queue(std::function<void()> callback) {
    if (callbacks_to_outer_ && outer_)
      outer_->queue(std::move(callback));
    else
      callbacks_.push_back(std::move(callback));
  }
  void send_callbacks_to_outer() { callbacks_to_outer_ = true; }

  void run() {
    // This task is the thread's current one while it runs (backwards may nest,
    // as DataParallel's replicas do inside the gather's backward).
    GraphTask* outer = current_;
    outer_ = outer;
    current_ = this;
    struct Restore {
      GraphTask*& slot;
      GraphTask* value;
      ~Restore() { slot = value; }
    } restore{current_, outer};
    count_dependencies();
    std::unordered_set<Node*> seen;
    for (const auto& root : roots_)
      if (dependencies_[root.get()] == 0 && seen.insert(root.get()).second) ready_.push(root.get());
    captured_.assign(captures_.size(), Tensor());
    while (!ready_.empty()) {
      Node* node = ready_.top();
      ready_.pop();
      execute(node);
    }
    // Callbacks may queue more callbacks.
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      std::function<void()> callback = std::move(callbacks_[i]);
      callback();
    }
  }

  static thread_local GraphTask* current_;

 private:
  void count_dependencies() {
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

  void execute(Node* node) {
    TensorList inputs = std::move(buffers_[node]);
    buffers_.erase(node);
    inputs.resize(node->num_outputs());
    for (size_t c = 0; c < captures_.size(); ++c)
      if (captures_[c].node.get() == node) captured_[c] = inputs[captures_[c].input_nr];

    bool any_gradient = false;
    for (const Tensor& g : inputs) any_gradient |= g.defined();
    const bool is_leaf_sink = dynamic_cast<AccumulateGrad*>(node) != nullptr;
    TensorList outputs;
    if (any_gradient && (accumulate_ || !is_leaf_sink)) {
      NoGradGuard no_grad;  // backward functions use ops that must not record
      outputs = node->apply(std::move(inputs));
      LOOM_INTERNAL_ASSERT(is_leaf_sink || outputs.size() == node->next_edges().size(), node->name(),
                           " returned ", outputs.size(), " gradients for ",
                           node->next_edges().size(), " inputs");
    }
    if (!retain_graph_) node->release_saved();

    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      if (i < outputs.size() && outputs[i].defined()) send(edge, outputs[i], node->name());
      if (--dependencies_[edge.node.get()] == 0) ready_.push(edge.node.get());
    }
  }

  // Adds `grad` into input `edge.input_nr` of `edge.node`'s buffer.
  void send(const Edge& edge, const Tensor& grad, const char* from) {
    const GradSpec& spec = edge.node->output_spec(edge.input_nr);
    LOOM_CHECK(grad.shape() == spec.shape && grad.dtype() == spec.dtype && grad.device() == spec.device,
               "backward: ", from, " produced a gradient of shape ", grad.shape(), " ", grad.dtype(),
               " on ", grad.device(), " for ", edge.node->name(), ", which expects shape ", spec.shape,
               " ", spec.dtype, " on ", spec.device);
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

  bool retain_graph_, accumulate_;
  std::vector<std::shared_ptr<Node>> roots_;
  std::unordered_map<Node*, int> dependencies_;
  std::unordered_map<Node*, TensorList> buffers_;
  std::priority_queue<Node*, std::vector<Node*>, LatestFirst> ready_;
  std::vector<Edge> captures_;
  TensorList captured_;
  std::vector<std::function<void()>> callbacks_;
  GraphTask* outer_ = nullptr;  // the task this one runs inside, while it runs
  bool callbacks_to_outer_ = false;
};

thread_local GraphTask* GraphTask::current_ = nullptr;

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

void seed(GraphTask& task, const TensorList& roots, const TensorList& grad_roots) {
  LOOM_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), "backward: got ",
             grad_roots.size(), " gradients for ", roots.size(), " outputs");
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    LOOM_CHECK(root.defined(), "backward: output ", i, " is undefined");
    LOOM_CHECK(root.requires_grad(), "backward: output ", i, " (shape ", root.shape(),
               ") does not require grad and has no grad_fn: nothing it was computed from "
               "requires grad, or it was computed under NoGradGuard");
    task.add_root(gradient_edge(root), root_gradient(root, grad_roots, i));
  }
}

}  // namespace

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph) {
  AutocastGuard no_autocast(std::nullopt);  // gradients take their forward's dtypes
  GraphTask task(retain_graph, /*accumulate=*/true);
  seed(task, roots, grad_roots);
  task.run();
}

void backward_nested(const TensorList& roots, const TensorList& grad_roots) {
  AutocastGuard no_autocast(std::nullopt);
  GraphTask task(/*retain_graph=*/false, /*accumulate=*/true);
  task.send_callbacks_to_outer();
  seed(task, roots, grad_roots);
  task.run();
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
  seed(task, outputs, grad_outputs);
  task.run();
  return task.captured();
}

}  // namespace loom::autograd
