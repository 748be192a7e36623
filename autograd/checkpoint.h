// Activation checkpointing (PyTorch's torch.utils.checkpoint): trade compute
// for memory. A checkpointed segment keeps only its inputs; its activations
// are recomputed during backward, when its gradient arrives.
//
//   Tensor y = autograd::checkpoint([&](const Tensor& x) { return block->forward(x); }, x);
//   loss(y).backward();   // the block runs forward again here, then its backward
//
// Forward runs `fn` without recording a graph and remembers the inputs and
// the random draws `fn` made on this thread (tensor/generator.h). Backward
// replays `fn` from the same inputs with the same random numbers (so Dropout
// drops the same elements, also when other threads drew from the generator
// in between, as DataParallel replicas do), under grad mode, and
// backpropagates the arriving gradients through the new graph: the
// parameters inside `fn` get their gradients then, and the inputs theirs
// through this node. The nested backward hands its callbacks to the
// outer one (engine.h), so DDP and FSDP hooks inside `fn` finish once.
//
// `fn` must compute the same thing both times: same modules, same mode, no
// side effects that matter (BatchNorm's running statistics are updated twice,
// as in PyTorch), and no random draws on threads it starts (a DataParallel
// inside `fn`: those are not recorded, so the replay draws new ones). An
// input modified in place before backward is an error. The outputs require
// grad whenever grad mode is on, since the parameters `fn` uses may need
// gradients even when its inputs do not.
#pragma once

#include <functional>

#include "tensor/tensor.h"

namespace loom::autograd {

using CheckpointFn = std::function<TensorList(const TensorList& inputs)>;

TensorList checkpoint(const CheckpointFn& fn, const TensorList& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace loom::autograd
