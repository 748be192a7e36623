// How a sequence's tokens are dealt to the ranks of a group, when each rank
// works on its share of every sequence (sequence and context parallelism).
//
//   kContiguous  rank r takes tokens [r T/N, (r+1) T/N)
//   kZigZag      the sequence cut into 2N chunks; rank r takes chunks r and
//                2N-1-r (Llama 3's context parallelism). Under a causal mask
//                a query sees the keys before it, so with contiguous shares
//                the last rank's queries see N times the first's; zig-zag
//                gives every rank one early and one late chunk, and as many
//                keys to attend to.
//
// Ranks hand each other the tokens they hold in rank order, so a gathered
// tensor is in sequence order only for kContiguous (in_sequence_order).
#pragma once

#include "nn/nn.h"
#include "parallel/comm/process_group.h"

namespace loom::parallel {

enum class SequenceSplit { kContiguous, kZigZag };

// The chunks a rank holds, each as (first token, tokens), for `tokens` tokens a rank.
struct SequenceChunk {
  int64_t first, length;
};
std::vector<SequenceChunk> chunks_of_rank(int rank, int ranks, int64_t tokens, SequenceSplit split);

// This rank's tokens of `x` along `dim` (the whole sequence), side by side.
Tensor shard_sequence(const Tensor& x, const ProcessGroup& group, SequenceSplit split, int64_t dim = 1);
// Rank `rank`'s tokens of `x` (the whole sequence along `dim`) among `ranks`, side by side.
Tensor tokens_of_rank(const Tensor& x, int rank, int ranks, SequenceSplit split, int64_t dim);

// Where this rank's `tokens` tokens lie in the sequence: (tokens) int64.
Tensor sequence_positions(int64_t tokens, const ProcessGroup& group, SequenceSplit split, Device device);

// Every rank's tokens as gathered (rank after rank along `dim`), put back in
// sequence order.
Tensor in_sequence_order(const Tensor& gathered, const ProcessGroup& group, SequenceSplit split, int64_t dim);

// `dropout` on this rank's tokens x (dim 1) with the mask the whole sequence
// gets: the rank draws the whole sequence's mask, as a rank holding every
// token does, and applies its tokens' part. So ranks seeded alike drop what
// one device would; in training it first checks that they do
// (check_ranks_draw_alike).
Tensor dropout_on_shard(nn::DropoutImpl& dropout, const Tensor& x, const ProcessGroup& group, SequenceSplit split);

// Dropout at probability p in training over `group` is only right when every
// rank draws the numbers the others draw, from a generator of its own seeded
// alike: one process a rank, or rank threads each holding a
// ThreadDefaultGenerator (tensor/generator.h). Rank threads sharing the
// process's generator are refused, with a message naming both ways.
void check_ranks_draw_alike(const char* model, double p, const ProcessGroup& group);

}  // namespace loom::parallel
