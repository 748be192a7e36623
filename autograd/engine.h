// Running backward: replay the tape from some roots to the leaves.
//
//   autograd::backward({loss});                       // what loss.backward() does
//   TensorList g = autograd::grad({y}, {x}, {dy});    // dy/dx without touching x.grad()
//
// On a GPU every node's backward runs on the calling thread's current stream
// of its device, like any other op, not (as in PyTorch) on the stream its
// forward used. So backpropagate where the forward ran: DataParallel
// replicas and pipeline stages run both on their own queue. A backward on
// another stream than its forward's must first wait for the forward's
// work (an Event), or its kernels may read activations not yet written.
#pragma once

#include <functional>

#include "autograd/node.h"

namespace loom::autograd {

// Accumulates d(roots)/d(leaf) into every leaf's .grad(). `grad_roots` gives
// the gradient of each root; it may be omitted for scalar roots (then 1).
void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false);

// A backward run from inside another backward's node (activation
// checkpointing recomputes a segment and backpropagates through it): the
// callbacks queued while it runs (queue_callback) run when the outer backward
// ends, so that DDP and FSDP, whose hooks fire inside it, finish once, at the
// end of the whole backward. Outside a backward it is backward(). Inside
// the first pass of a split backward (split_backward.h) it splits too:
// `inputs`, the leaves whose gradients the caller reads when it returns,
// get theirs now, and the rest (the segment's weights) waits for the outer
// backward's second pass.
void backward_nested(const TensorList& roots, const TensorList& grad_roots, const TensorList& inputs = {});

// The gradients of `outputs` w.r.t. `inputs` (undefined where an input does
// not affect the outputs). Leaves' .grad() are left alone.
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, bool retain_graph = false);

// Runs `callback` on this thread when the backward now running on it has
// finished all its nodes (PyTorch's queue_callback). Called from a gradient
// hook, it lets DistributedDataParallel wait for its last all-reduces.
// Outside a backward it is an error.
void queue_callback(std::function<void()> callback);

}  // namespace loom::autograd
