#include "parallel/context_parallel/attention.h"

#include <cmath>
#include <limits>

#include "parallel/tensor_parallel/conjugates.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace loom::parallel {

namespace {

// Causal attention of queries q (B, H, L, D) at positions [first, first + L)
// to the keys and values of the sequence (in order) up to the last of them.
Tensor attend_up_to(const Tensor& q, const Tensor& keys, const Tensor& values, int64_t first) {
  const int64_t length = q.size(2), seen = first + length;
  const TensorOptions positions{.dtype = kInt64, .device = q.device()};
  const Tensor query_at = (arange(length, positions) + static_cast<double>(first)).reshape({length, 1});
  const Tensor future = arange(seen, positions).reshape({1, seen}) > query_at;  // (L, seen)
  const double scale = 1 / std::sqrt(static_cast<double>(q.size(3)));
  const Tensor scores = masked_fill(matmul(q, keys.narrow(2, 0, seen).transpose(2, 3)) * scale, future,
                                    -std::numeric_limits<double>::infinity());
  // Exact zeros where the mask is: the softmax's exp leaves denormals there, which slow the product a hundredfold.
  return matmul(masked_fill(softmax(scores, -1), future, 0.0), values.narrow(2, 0, seen));
}

}  // namespace

Tensor context_parallel_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::shared_ptr<ProcessGroup>& group, SequenceSplit split) {
  LOOM_CHECK(q.dim() == 4 && q.shape() == k.shape() && k.shape() == v.shape(),
             "context_parallel_attention: expected q, k, v of one shape (B, H, T/N, D), got ", q.shape(), ", ",
             k.shape(), ", ", v.shape());
  // Every rank's keys and values, in sequence order.
  const Tensor keys = in_sequence_order(gather_from_sequence_parallel(k, group, 2), *group, split, 2);
  const Tensor values = in_sequence_order(gather_from_sequence_parallel(v, group, 2), *group, split, 2);
  // Each of this rank's chunks attends to the keys up to its own last token.
  TensorList out;
  int64_t at = 0;
  for (const SequenceChunk& c : chunks_of_rank(group->rank(), group->size(), q.size(2), split)) {
    out.push_back(attend_up_to(q.narrow(2, at, c.length), keys, values, c.first));
    at += c.length;
  }
  return out.size() == 1 ? out[0] : cat(out, 2);
}

}  // namespace loom::parallel
