// Context parallelism: a sequence too long for one device's attention is cut
// along its tokens over the ranks of a group, and every layer runs on its
// rank's tokens only. Everything in a transformer but attention is per
// token; attention is where tokens meet. Here each rank all-gathers the keys
// and values (Llama 3's all-gather form; ring attention passes them from
// rank to rank instead) and attends with its own queries to the keys up to
// its last token:
//
//   rank r holds tokens [r T/N, (r+1) T/N)
//   keys, values:  all-gathered along the sequence, the first (r+1) T/N kept
//   scores:        q Kᵀ / √d, (T/N, (r+1) T/N), masked where a key comes after the query
//
// The all-gather's backward reduce-scatters: the gradient of a rank's keys
// and values sums the uses every later rank made of them. The weights are
// replicated, so their gradients are averaged over the group as in DDP.
//
// The causal cut is uneven: rank N-1 attends to N times the keys rank 0
// does. Llama 3 balances it by giving rank r the chunks r and 2N-1-r of 2N.
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

// Causal attention of this rank's queries q (B, H, T/N, D) to the keys and
// values of every rank's tokens up to its own, k and v being this rank's
// (B, H, T/N, D). Returns (B, H, T/N, D).
Tensor context_parallel_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::shared_ptr<ProcessGroup>& group);

}  // namespace loom::parallel
