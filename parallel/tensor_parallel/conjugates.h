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
// Sequence parallelism (Korthikanti et al., 2022) splits the all-reduces in
// two, since an all-reduce is a reduce-scatter followed by an all-gather, and
// lets the layers between them (norms, dropout, residual adds) work on 1/N of
// the tokens each, cut along the sequence dim:
//
//   gather_from_sequence_parallel        forward: all-gather      backward: reduce-scatter
//   reduce_scatter_to_sequence_parallel  forward: reduce-scatter  backward: all-gather
//
// The first stands in f's place, where a column-parallel layer takes its
// input: every rank needs all the tokens, and a token's gradient, the sum of
// every rank's part, lands on the rank that holds the token. The second
// stands in g's place, where a row-parallel layer's partial sums leave it.
// `dim` is the sequence dim; its size must divide by the group's ranks.
//
// gather_sequence_linear is the first fused with the product that consumes
// it, y = all_gather(x) Wᵀ + b, keeping only this rank's x for backward and
// gathering it again there for W's gradient (the paper's section 4.2.2): the
// gathered input, N times larger, is not held from forward to backward.
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

Tensor copy_to_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
Tensor reduce_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
Tensor gather_from_tensor_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);

Tensor gather_from_sequence_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int64_t dim = 1);
Tensor reduce_scatter_to_sequence_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group,
                                           int64_t dim = 1);
Tensor gather_sequence_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::shared_ptr<ProcessGroup>& group, int64_t dim = 1);

}  // namespace loom::parallel
