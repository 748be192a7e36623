// The autograd graph: Node (one recorded op), Edge (where a gradient goes),
// SavedTensor (a value kept for backward) and record() (how an op joins the graph).
//
// The tape. Each thread numbers the nodes it records (sequence_nr), so the
// numbers are the thread's tape: a node always comes after the nodes of its
// inputs. backward() replays the part of the tape reachable from the loss,
// newest first. The nodes themselves are owned by the tensors they produced
// (Tensor::grad_fn), as in PyTorch, so the tape of a forward pass that is
// never backpropagated frees itself when its tensors go out of scope.
//
// An op records itself like this (tensor/ops/ has many more):
//
//   Tensor y = ...forward...;
//   if (autograd::needs_grad(x))
//     autograd::record("TanhBackward", {x}, y, [y = autograd::SavedTensor(y)](const TensorList& dy) {
//       return TensorList{dy[0] * (1 - y.get().square())};
//     });
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/tensor.h"

namespace loom::autograd {

class Node;

// Where a gradient flows: input `input_nr` of `node` (null node: nowhere).
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

// Which of a node's inputs a backward asks gradients for: input i when
// wanted[i]; all of them when empty.
using InputMask = std::vector<bool>;
inline bool wants(const InputMask& wanted, size_t input) { return wanted.empty() || wanted[input]; }

// What a gradient arriving at a node must look like.
struct GradSpec {
  Shape shape;
  DType dtype;
  Device device;
};

class Node {
 public:
  Node(std::vector<Edge> next_edges, uint64_t sequence_nr)
      : next_edges_(std::move(next_edges)), sequence_nr_(sequence_nr) {}
  virtual ~Node() = default;

  virtual const char* name() const = 0;
  // Gradients w.r.t. this node's outputs in, gradients w.r.t. its inputs out
  // (one per next edge; undefined where an input gets none).
  virtual TensorList apply(TensorList&& grad_outputs) = 0;
  // Frees what the node saved for backward, once backward no longer needs it.
  virtual void release_saved() {}
  // Whether apply_selected computes only the gradients it is asked for. Ops
  // whose inputs' gradients are separate computations (a product's dA and
  // dB, a convolution's dx and dw) are: a split backward (split_backward.h)
  // asks them for the activations' gradients first and the weights' later.
  virtual bool selective() const { return false; }
  // The gradients for the `wanted` inputs (the others may be left undefined);
  // a node that is not selective computes them all.
  virtual TensorList apply_selected(TensorList&& grad_outputs, const InputMask& wanted) {
    (void)wanted;
    return apply(std::move(grad_outputs));
  }

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  int num_outputs() const { return static_cast<int>(output_specs_.size()); }
  const GradSpec& output_spec(int i) const { return output_specs_[i]; }
  void add_output(const Tensor& t) { output_specs_.push_back({t.shape(), t.dtype(), t.device()}); }

 private:
  std::vector<Edge> next_edges_;
  uint64_t sequence_nr_;
  std::vector<GradSpec> output_specs_;
};

// The next position on this thread's tape.
uint64_t next_sequence_nr();

using BackwardFn = std::function<TensorList(const TensorList& grad_outputs)>;
// A backward that computes only the gradients of the inputs in `wanted`.
using SelectiveBackwardFn = std::function<TensorList(const TensorList& grad_outputs, const InputMask& wanted)>;

// A node whose backward is a function: how almost every op records itself.
// It holds one of the two kinds of function.
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, std::vector<Edge> next_edges, BackwardFn backward)
      : Node(std::move(next_edges), next_sequence_nr()), name_(name), backward_(std::move(backward)) {}
  FunctionNode(const char* name, std::vector<Edge> next_edges, SelectiveBackwardFn backward)
      : Node(std::move(next_edges), next_sequence_nr()), name_(name), selective_backward_(std::move(backward)) {}
  const char* name() const override { return name_; }
  TensorList apply(TensorList&& grad_outputs) override { return apply_selected(std::move(grad_outputs), {}); }
  bool selective() const override { return selective_backward_ != nullptr; }
  TensorList apply_selected(TensorList&& grad_outputs, const InputMask& wanted) override;
  void release_saved() override {
    backward_ = nullptr;
    selective_backward_ = nullptr;
  }

 private:
  const char* name_;
  BackwardFn backward_;                    // null once released
  SelectiveBackwardFn selective_backward_;  // or this
};

// The sink of a leaf's gradients: adds them to leaf.grad() and then runs the
// leaf's post-accumulate hooks. It runs as soon as the leaf's gradient is
// final, ahead of every other ready node.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  const char* name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grad_outputs) override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// A tensor kept for backward. It remembers the storage version at saving, so
// that an in-place change before backward is an error, not a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  const Tensor& get() const;

 private:
  Tensor data_;  // detached: saving an output must not make a cycle
  uint32_t version_ = 0;
};

// Adds `grad` into leaf.grad() exactly as backward does (thread-safe, never
// aliasing memory another tensor can see), without running hooks.
// DataParallel reduces replicas' gradients onto the master parameters with it.
void accumulate_grad(const Tensor& leaf, const Tensor& grad);

// True when grad mode is on and any of the tensors requires grad.
bool needs_grad(const Tensor& a);
bool needs_grad(const Tensor& a, const Tensor& b);
bool needs_grad(const TensorList& tensors);

// The edge a gradient for `t` must take: its grad_fn, or its AccumulateGrad.
Edge gradient_edge(const Tensor& t);

// Makes `outputs` the results of a new node computed from `inputs`. Inputs
// that need no gradient get an invalid edge (their gradient is dropped).
void record(const char* name, const TensorList& inputs, const TensorList& outputs, BackwardFn backward);
inline void record(const char* name, const TensorList& inputs, const Tensor& output, BackwardFn backward) {
  record(name, inputs, TensorList{output}, std::move(backward));
}
// The same for a backward that can compute only the wanted inputs' gradients.
void record_selective(const char* name, const TensorList& inputs, const TensorList& outputs,
                      SelectiveBackwardFn backward);

}  // namespace loom::autograd
