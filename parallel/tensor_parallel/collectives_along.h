// Collectives on a tensor along one of its dims, without autograd: what the
// conjugate operators (conjugates.h, sequence_conjugates.h) run in forward
// and in their backward nodes. Each waits for its collective.
//
//   Tensor whole = all_gathered(piece, /*dim=*/1, group);     // (B, T/N, C) -> (B, T, C)
//   Tensor mine = reduce_scattered(partial, /*dim=*/1, group); // (B, T, C) -> (B, T/N, C), summed
#pragma once

#include <cstdint>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

// The sum over the ranks, in a tensor of its own.
Tensor all_reduced(const Tensor& x, ProcessGroup& group);
// Every rank's `x` side by side along `dim`, in rank order.
Tensor all_gathered(const Tensor& x, int64_t dim, ProcessGroup& group);
// The sum over the ranks of `x`, cut along `dim` into one piece per rank:
// this rank's. `dim`'s size must divide by the ranks.
Tensor reduce_scattered(const Tensor& x, int64_t dim, ProcessGroup& group);

}  // namespace loom::parallel
