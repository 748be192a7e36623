// Ulysses attention (DeepSpeed-Ulysses): context parallelism that trades the
// sequence split for a head split around attention.
//
// A rank holds its tokens of every head. Two all-to-alls turn that inside
// out and back:
//
//   q, k, v (B, H, T/N, D)   this rank's tokens, every head
//     all-to-all             rank j gets heads [j H/N, (j+1) H/N) of every rank's tokens
//   (B, H/N, T, D)           every token of this rank's heads, in sequence order
//     causal attention       the whole sequence, no mask shifted, nothing merged
//     all-to-all             each rank's tokens go back to it
//   (B, H, T/N, D)           this rank's tokens, every head
//
// Each rank sends and receives (N-1)/N of its q, k, v and output a step
// forward, the same again backward (the all-to-all's gradient is the
// all-to-all the other way), whatever N is; the ring and the all-gather
// send N-1 blocks of keys and values. The cost: the heads must divide by N,
// and attention runs on whole sequences, so one rank must hold a sequence's
// scores for its heads (the fused kernels never store them).
// Built here from point-to-point sends and receives (N-1 of each).
#pragma once

#include <memory>

#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::parallel {

// Causal attention of this rank's queries q (B, H, T/N, D), its tokens of
// the sequence as `split` deals them, to the keys and values of every
// rank's tokens before them; k and v are this rank's (B, H, T/N, D), and H
// must divide by the group's size. Returns (B, H, T/N, D): what
// context_parallel_attention returns. Every rank calls it, with one shape.
Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::shared_ptr<ProcessGroup>& group,
                         SequenceSplit split = SequenceSplit::kContiguous);

}  // namespace loom::parallel
