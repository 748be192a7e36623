// What the sharded strategies (ZeRO, FSDP) share: parameters laid out in one
// flat tensor, and that tensor cut into one piece per rank.
//
//   Tensor flat = flatten_as_views(params, {0, 1, 2});  // params 0-2 now view `flat`
//   Pieces pieces(flat.numel(), group->size());
//   Tensor mine = flat.narrow(0, pieces.start(rank), pieces.size(rank));
//
// Collectives then move whole pieces: reduce_scatter leaves rank r the
// reduction of its piece, all_gather fills every piece from its owner; both
// run in place on views like `mine`, so a shard needs no memory of its own.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace loom::parallel {

// `numel` elements cut into n contiguous pieces in rank order; the first
// numel % n pieces have one element more, so no two differ by more than one.
class Pieces {
 public:
  Pieces(int64_t numel, int n);
  int64_t start(int rank) const { return starts_[rank]; }
  int64_t size(int rank) const { return starts_[rank + 1] - starts_[rank]; }
  int64_t numel() const { return starts_.back(); }

 private:
  std::vector<int64_t> starts_;  // n + 1 entries
};

// A new contiguous tensor holding params[i] for i in `which`, in that order;
// each of those parameters becomes a view of its place in it (set_data keeps
// the parameter's identity, hooks and requires_grad). They must share dtype
// and device.
Tensor flatten_as_views(const TensorList& params, const std::vector<size_t>& which);

// Where each parameter of `which` starts in the flat tensor, in elements.
std::vector<int64_t> flat_offsets(const TensorList& params, const std::vector<size_t>& which);

}  // namespace loom::parallel
