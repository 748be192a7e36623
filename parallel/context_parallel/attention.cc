#include "parallel/context_parallel/attention.h"

#include "nn/functional.h"
#include "parallel/context_parallel/ring_attention.h"
#include "parallel/context_parallel/ulysses_attention.h"
#include "parallel/tensor_parallel/sequence_conjugates.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace loom::parallel {

void check_shards(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  const std::shared_ptr<ProcessGroup>& group) {
  LOOM_CHECK(group != nullptr, op, ": no process group");
  LOOM_CHECK(q.dim() == 4 && q.shape() == k.shape() && k.shape() == v.shape(), op,
             ": expected q, k, v of one shape (B, H, T/N, D), got ", q.shape(), ", ", k.shape(), ", ", v.shape());
}

Tensor context_parallel_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::shared_ptr<ProcessGroup>& group, SequenceSplit split) {
  check_shards("context_parallel_attention", q, k, v, group);
  // Every rank's keys and values, in sequence order: one all-gather of both, side by side.
  const int64_t head_dim = k.size(3);
  const Tensor both = in_sequence_order(gather_from_sequence_parallel(cat({k, v}, 3), group, 2), *group, split, 2);
  const Tensor keys = both.narrow(3, 0, head_dim), values = both.narrow(3, head_dim, head_dim);
  // Each of this rank's chunks attends to the keys up to its own last token.
  TensorList out;
  int64_t at = 0;
  for (const SequenceChunk& c : chunks_of_rank(group->rank(), group->size(), q.size(2), split)) {
    // Causal with fewer queries than keys: the queries are the last of the keys' positions.
    const int64_t seen = c.first + c.length;
    out.push_back(nn::functional::scaled_dot_product_attention(q.narrow(2, at, c.length), keys.narrow(2, 0, seen),
                                                               values.narrow(2, 0, seen), /*causal=*/true));
    at += c.length;
  }
  return out.size() == 1 ? out[0] : cat(out, 2);
}

Tensor context_parallel_self_attention(const Tensor& qkv, int64_t heads, const std::shared_ptr<ProcessGroup>& group,
                                       SequenceSplit split, KeyValueExchange exchange) {
  LOOM_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0,
             "context_parallel_self_attention: expected q, k and v side by side (B, T/N, 3W), W a multiple of the ",
             heads, " heads, got ", qkv.shape());
  const int64_t b = qkv.size(0), t = qkv.size(1), width = qkv.size(2) / 3;
  const TensorList parts = loom::split(qkv, width, 2);
  auto by_head = [&](const Tensor& z) { return z.reshape({b, t, heads, width / heads}).transpose(1, 2); };
  const Tensor q = by_head(parts[0]), k = by_head(parts[1]), v = by_head(parts[2]);
  const Tensor y = exchange == KeyValueExchange::kRing        ? ring_attention(q, k, v, group, split)
                   : exchange == KeyValueExchange::kAllToAll ? ulysses_attention(q, k, v, group, split)
                                                             : context_parallel_attention(q, k, v, group, split);
  return y.transpose(1, 2).reshape({b, t, width});
}

}  // namespace loom::parallel
