// A backward in two passes, for zero-bubble pipeline schedules (Qi et al.
// 2023, "Zero Bubble Pipeline Parallelism"): first the gradients that flow
// to `inputs` (a pipeline stage's input, which the previous stage is waiting
// for), then, whenever the caller likes, the weights' gradients, which no
// other stage waits for.
//
//   autograd::WeightGradients rest = autograd::backward_inputs_first({y}, {dy}, {x});
//   send(x.grad());   // final here; the parameters' .grad() are not touched yet
//   ...               // other work: a forward, another micro-batch's backward
//   rest.compute();   // now the parameters have their gradients
//
// The first pass runs the nodes on a path from the roots to `inputs`. Of
// those, the selective ones (Node::selective: products, convolutions)
// compute only their gradients along the path, keep what they saved, and
// compute the rest in the second pass; the others compute all their
// gradients at once, as usual. Nodes that lead only to weights (a weight's
// transpose, a bias's sum, an embedding) wait for the second pass. Together
// the two passes accumulate exactly what backward() would. Run compute()
// where the first pass ran: on its thread, and on a GPU its queue (stream),
// as every backward runs on the calling thread's current stream (engine.h).
#pragma once

#include <memory>

#include "autograd/node.h"

namespace loom::autograd {

namespace detail {
class GraphTask;
}

// What the first pass left for the second: the parked nodes, their
// gradients and what they saved. Dropping it unrun discards the weights'
// gradients (and frees what they would have needed).
class WeightGradients {
 public:
  WeightGradients();
  WeightGradients(WeightGradients&&) noexcept;
  WeightGradients& operator=(WeightGradients&&) noexcept;
  ~WeightGradients();

  // The second pass: accumulates the rest into the leaves' .grad(), then runs
  // the callbacks queued during either pass (DDP's). Only once.
  void compute();
  bool pending() const { return task_ != nullptr; }

 private:
  friend WeightGradients backward_inputs_first(const TensorList&, const TensorList&, const TensorList&);
  std::unique_ptr<detail::GraphTask> task_;
};

// The first pass: accumulates d(roots)/d(input) into each input's .grad()
// (inputs are leaves that require grad, as a stage's received activation
// is) and returns the second. `grad_roots` as for backward().
WeightGradients backward_inputs_first(const TensorList& roots, const TensorList& grad_roots,
                                      const TensorList& inputs);

}  // namespace loom::autograd
