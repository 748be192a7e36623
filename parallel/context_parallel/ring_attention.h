// Ring attention: context parallelism without gathering every key and value.
//
// context_parallel_attention (attention.h) all-gathers the keys and values,
// so each rank holds the whole sequence's at once. Here they travel round
// the ranks instead, a rank's block at a time:
//
//   step s = 0 .. N-1: rank r holds rank (r - s)'s keys and values
//     issue   send them on to rank r+1, receive the next block from rank r-1
//     compute each of r's query chunks against each chunk of the block:
//               keys before the queries   attention over all of them
//               the queries' own chunk    causal attention (a square mask)
//               keys after the queries    nothing (the causal mask hides them)
//             and merge the block's output into the chunk's by their two
//             logsumexps, as FlashAttention merges its key tiles
//     wait    for the next block (it travelled while the products ran)
//
// A rank holds two blocks at a time, not N, and the transfers hide behind
// the products wherever a block's products take longer than its transfer.
//
// Backward sends the keys and values round again, each with the gradient it
// has gathered so far: rank r adds its queries' share of a block's dk and dv
// (nn::functional::attention_block_backward, from the whole attention's out
// and logsumexp) and hands both on; after N hops a block's gradient is back
// with its owner, complete. dq stays at home, summed over the blocks.
//
// Every block is square (a rank's chunks are all T/N or T/2N tokens), so on
// CUDA the fused kernels run it, where the all-gather form's longer keys
// need the composite. The weights are replicated as for
// context_parallel_attention: average their gradients over the group (DDP).
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::parallel {

// Causal attention of this rank's queries q (B, H, T/N, D), its tokens of
// the sequence as `split` deals them, to the keys and values of every rank's
// tokens before them; k and v are this rank's (B, H, T/N, D). Returns
// (B, H, T/N, D): what context_parallel_attention returns, computed with the
// keys and values passed round the ring. Every rank calls it, with one shape.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::shared_ptr<ProcessGroup>& group,
                      SequenceSplit split = SequenceSplit::kContiguous);

}  // namespace loom::parallel
