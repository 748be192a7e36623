// One run of the backward engine over a graph (internal to autograd/): the
// dependency counts, the gradient buffers and the ready queue.
//
// 1. Walk the graph from the roots and count, for each node, how many edges
//    reach it (its dependencies).
// 2. Seed the roots' gradient buffers; roots with no dependencies are ready.
// 3. Repeatedly run the ready node that is latest on the tape: sum what
//    arrived in its buffer, call its backward, send each result along its
//    edge, and make a node ready once all its dependencies have sent. A leaf's
//    AccumulateGrad is thus run the moment its gradient is final.
//
// A split task (split_backward.h) runs in two phases. The first runs only
// the nodes on a path to the targets (a pipeline stage's input); a selective
// node there computes only its gradients along that path and is parked with
// its incoming gradients. The second phase finishes the parked nodes'
// other gradients and runs every node left (those that lead only to weights).
#pragma once

#include <functional>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "autograd/node.h"

namespace loom::autograd::detail {

class GraphTask {
 public:
  GraphTask(bool retain_graph, bool accumulate) : retain_graph_(retain_graph), accumulate_(accumulate) {}

  // The roots and their gradients (omitted for a single-element root: 1).
  void add_roots(const TensorList& roots, const TensorList& grad_roots);
  // Gradients that reach `edge` are kept (for autograd::grad).
  void capture(const Edge& edge) { captures_.push_back(edge); }
  TensorList captured() const { return captured_; }
  // Makes run() the first phase of a split backward towards the gradients
  // of `inputs` (those that require grad).
  void split_towards(const TensorList& inputs);

  // A nested task hands its callbacks to the task around it.
  void queue(std::function<void()> callback);
  void send_callbacks_to_outer() { callbacks_to_outer_ = true; }

  // The whole backward, or a split task's first phase.
  void run();
  // A split task's second phase; then the queued callbacks.
  void run_rest();
  bool in_first_phase() const { return first_phase_; }
  // A split task nested in this one's first phase (a checkpointed segment's
  // backward) runs its second phase in this one's.
  void run_rest_with_mine(std::unique_ptr<GraphTask> nested) { nested_.push_back(std::move(nested)); }

  static thread_local GraphTask* current_;

 private:
  // The node's parked gradients and the inputs it still owes gradients to.
  struct Parked {
    Node* node;
    TensorList grad_outputs;
    InputMask rest;
  };

  // Sets this task as the thread's current one for its scope (backwards may
  // nest, as DataParallel's replicas do inside the gather's backward).
  class AsCurrent;

  void add_root(const Edge& edge, const Tensor& grad);
  void count_dependencies();
  void mark_paths_to_targets();
  void drain();
  void run_callbacks();
  void execute(Node* node);
  // Sends `outputs` along the edges in `mask` and counts those edges done.
  void dispatch(Node* node, const TensorList& outputs, const InputMask& mask);
  void make_ready(Node* node);
  bool on_target_path(Node* node) const { return on_target_path_.count(node) > 0; }
  void send(const Edge& edge, const Tensor& grad, const char* from);

  bool retain_graph_, accumulate_;
  std::vector<std::shared_ptr<Node>> roots_;
  std::unordered_map<Node*, int> dependencies_;
  std::unordered_map<Node*, TensorList> buffers_;
  struct LatestFirst {
    bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
  };
  std::priority_queue<Node*, std::vector<Node*>, LatestFirst> ready_;
  std::vector<Edge> captures_;
  TensorList captured_;
  std::vector<std::function<void()>> callbacks_;
  GraphTask* outer_ = nullptr;  // the task this one runs inside, while it runs
  bool callbacks_to_outer_ = false;

  // A split task's state.
  bool split_ = false, first_phase_ = false;
  std::vector<Edge> target_edges_;  // hold the targets while the task lives
  std::unordered_set<Node*> targets_, on_target_path_;
  std::vector<Node*> later_;    // nodes off the path, ready for the second phase
  std::vector<Parked> parked_;  // selective nodes with gradients still owed
  std::vector<std::unique_ptr<GraphTask>> nested_;  // split tasks whose second phase waits for ours
};

}  // namespace loom::autograd::detail
