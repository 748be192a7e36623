// The conjugate operators of sequence parallelism (Korthikanti et al.,
// 2022), beside tensor parallelism's f and g (conjugates.h). They split f's
// and g's all-reduces in two, since an all-reduce is a reduce-scatter
// followed by an all-gather, and let the layers between them (norms,
// dropout, residual adds) work on 1/N of the tokens each, cut along the
// sequence dim:
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

#include <cstdint>
#include <memory>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

Tensor gather_from_sequence_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int64_t dim = 1);
Tensor reduce_scatter_to_sequence_parallel(const Tensor& x, const std::shared_ptr<ProcessGroup>& group,
                                           int64_t dim = 1);
Tensor gather_sequence_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::shared_ptr<ProcessGroup>& group, int64_t dim = 1);

}  // namespace loom::parallel
