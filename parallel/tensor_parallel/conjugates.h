// The two conjugate operators of Megatron-LM's tensor parallelism (Shoeybi et
// al., 2019), as autograd nodes of their own, so that the layers read like
// the paper. With the ranks of `group` each holding a slice of a layer:
//
//   f = copy_to_tensor_parallel      forward: identity     backward: all-reduce (sum)
//   g = reduce_from_tensor_parallel  forward: all-reduce   backward: identity
//
// f stands where a replicated activation enters a column-parallel layer:
// every rank uses all of it, so its gradient is the sum of every rank's part.
// g stands where the partial sums of a row-parallel layer leave it: the
// replicated result's gradient is the same on every rank and each rank's
// partial sum takes it whole. A transformer block needs one f and one g in
// its attention and one of each in its MLP, forward and backward alike.
//
// gather_from_tensor_parallel concatenates every rank's slice along the last
// dim (backward: this rank's slice of the gradient), for the few places that
// need a whole activation (a gathered output, generation's logits).
//
// Sequence parallelism splits f and g in two (sequence_conjugates.h).
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

Tensor copy_to_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
Tensor reduce_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
Tensor gather_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);

}  // namespace loom::parallel
