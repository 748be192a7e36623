// Context parallelism: a sequence too long for one device's attention is cut
// along its tokens over the ranks of a group, and every layer runs on its
// rank's tokens only. Everything in a transformer but attention is per
// token; attention is where tokens meet. Here each rank all-gathers the keys
// and values (Llama 3's all-gather form; ring attention passes them from
// rank to rank instead), puts them in sequence order, and attends with each
// of its chunks of queries to the keys up to that chunk's last token:
//
//   keys, values:  all-gathered along the sequence, in sequence order
//   a chunk at [first, first + L):  scaled_dot_product_attention over keys
//                                   [0, first + L), causal: the chunk's queries
//                                   are the last L of those positions (on the
//                                   CPU the fused kernel, which skips the
//                                   masked blocks and never stores the scores)
//
// The all-gather's backward reduce-scatters: the gradient of a rank's keys
// and values sums the uses every rank made of them. The weights are
// replicated, so their gradients are averaged over the group as in DDP.
//
// With contiguous shares the causal cut is uneven: the last rank's queries
// see N times the keys the first's do. SequenceSplit::kZigZag gives each
// rank one early and one late chunk (sequence_split.h), so every rank
// computes as many scores.
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::parallel {

// How a rank gets the other ranks' keys and values.
enum class KeyValueExchange {
  kAllGather,  // context_parallel_attention: all of them at once, in one all-gather
  kRing,       // ring_attention (ring_attention.h): a rank's block at a time, behind the products
  kAllToAll,   // ulysses_attention (ulysses_attention.h): heads split instead of tokens, around attention
};

// What every form of context-parallel attention checks first: a group, and
// q, k, v of one shape (B, H, T/N, D). `op` names the form in the message.
void check_shards(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  const std::shared_ptr<ProcessGroup>& group);

// Causal attention of this rank's queries q (B, H, T/N, D), its tokens of
// the sequence as `split` deals them, to the keys and values of every rank's
// tokens before them; k and v are this rank's (B, H, T/N, D). Returns
// (B, H, T/N, D).
Tensor context_parallel_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::shared_ptr<ProcessGroup>& group,
                                  SequenceSplit split = SequenceSplit::kContiguous);

// Causal self-attention of this rank's tokens over the group, from the
// heads of one projection: qkv (B, T/N, 3W) holds q, k and v side by side,
// each `heads` heads of W/heads (a GPT block's whole projection, or in
// tensor parallel a rank's heads of it). The keys and values travel as
// `exchange` says. Returns (B, T/N, W), the heads side by side again, ready
// for the output projection.
Tensor context_parallel_self_attention(const Tensor& qkv, int64_t heads, const std::shared_ptr<ProcessGroup>& group,
                                       SequenceSplit split, KeyValueExchange exchange);

}  // namespace loom::parallel
