// Descriptor: what each rank says about a collective before its payload moves.
//
// Ranks that call different collectives, or the same one with different sizes,
// dtypes, roots or reduce ops, would otherwise exchange garbage or hang. So
// every backend first shares one small descriptor per rank (56 bytes), and
// every rank runs the same check over the same descriptors: they all fail
// together, with the same message, and the group stays usable.
//
//   std::vector<Descriptor> all = /* gathered from every rank, in rank order */;
//   check_descriptors(op, all);                    // throws loom::Error on a mismatch
//   auto counts = split_counts(all, op.kind);      // all_gather / reduce_scatter sizes
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/comm/op.h"

namespace loom::parallel {

struct Descriptor {
  int64_t kind = 0;        // OpKind
  int64_t seq = 0;         // the collective's number in its group
  int64_t dtype = -1;      // DType; -1 for a barrier
  int64_t numel = 0;       // elements of the input
  int64_t out_numel = 0;   // all_gather, reduce_scatter: elements of the output
  int64_t arg = -1;        // all_reduce, reduce_scatter: the ReduceOp; broadcast: the root
  int64_t split_hash = 0;  // all_gather into a list: hash_sizes() of the outputs' sizes
  // all_gather, reduce_scatter in place: where the rank's piece (the input,
  // the output) starts in the whole, in elements; -1 when not in place.
  int64_t in_place_at = -1;
};
inline constexpr int kDescriptorWords = sizeof(Descriptor) / sizeof(int64_t);
static_assert(sizeof(Descriptor) == 8 * sizeof(int64_t), "Descriptor travels as 8 int64s");

Descriptor make_descriptor(const Op& op);

// Elements from the start of `whole` to the start of `piece` when `piece`
// lies wholly inside `whole` (an in-place all_gather's input, reduce_scatter's
// output), else -1: two pieces of one buffer that do not overlap are not in
// place, nor is an empty piece.
int64_t offset_inside(const Tensor& piece, const Tensor& whole);

// Throws loom::Error, beginning with op.where(), when the ranks' descriptors
// disagree; `all` holds one per rank, in rank order.
void check_descriptors(const Op& op, const std::vector<Descriptor>& all);

// Elements each rank contributes (all_gather: the inputs) or receives
// (reduce_scatter: the outputs), in rank order. Ranks may differ.
std::vector<int64_t> split_counts(const std::vector<Descriptor>& all, OpKind kind);

// A hash of a list of sizes (FNV-1a), never 0.
int64_t hash_sizes(const std::vector<int64_t>& sizes);

}  // namespace loom::parallel
