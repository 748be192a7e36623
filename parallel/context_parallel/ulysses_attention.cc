#include "parallel/context_parallel/ulysses_attention.h"

#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "parallel/context_parallel/attention.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace loom::parallel {
namespace {

constexpr int kAllToAllTag = 7201;

// pieces[j] goes to rank j; returns the piece each rank j sent here, in rank
// order. Every piece has one shape, on every rank. No autograd.
TensorList exchange(const TensorList& pieces, ProcessGroup& group) {
  const int n = group.size(), rank = group.rank();
  TensorList received(n);
  std::vector<WorkPtr> works;
  for (int j = 0; j < n; ++j) {
    if (j == rank) continue;
    works.push_back(group.send(pieces[j].contiguous(), j, kAllToAllTag));
    received[j] = empty_like(pieces[j]);
    works.push_back(group.recv(received[j], j, kAllToAllTag));
  }
  received[rank] = pieces[rank].detach();  // this rank's own piece stays; a tensor of its own, to be an output
  for (const WorkPtr& work : works) work->wait();
  return received;
}

// The all-to-all as an autograd op: its gradient is the all-to-all the other
// way (the gradient of what rank j sent here goes back to rank j).
TensorList all_to_all(const TensorList& pieces, const std::shared_ptr<ProcessGroup>& group) {
  TensorList received;
  {
    NoGradGuard no_grad;
    received = exchange(pieces, *group);
  }
  if (autograd::needs_grad(pieces))
    autograd::record("AllToAllBackward", pieces, received, [group](const TensorList& grads) {
      NoGradGuard no_grad;
      return exchange(grads, *group);
    });
  return received;
}

}  // namespace

Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::shared_ptr<ProcessGroup>& group,
                         SequenceSplit split) {
  check_shards("ulysses_attention", q, k, v, group);
  const int n = group->size();
  const int64_t heads = q.size(1) / n, head_dim = q.size(3);
  LOOM_CHECK(q.size(1) % n == 0, "ulysses_attention: ", q.size(1), " heads do not split over ", n,
             " ranks (each rank attends with 1/N of them)");
  chunks_of_rank(group->rank(), n, q.size(2), split);  // the split's own check, before any message
  // Heads to ranks: rank j gets heads [j H/N, (j+1) H/N) of this rank's tokens, q, k and v side by side.
  const Tensor qkv = cat({q, k, v}, 3);
  TensorList by_heads;
  for (int j = 0; j < n; ++j) by_heads.push_back(qkv.narrow(1, j * heads, heads));
  const Tensor mine = in_sequence_order(cat(all_to_all(by_heads, group), 2), *group, split, 2);  // (B, H/N, T, 3D)
  const Tensor y = nn::functional::scaled_dot_product_attention(
      mine.narrow(3, 0, head_dim), mine.narrow(3, head_dim, head_dim), mine.narrow(3, 2 * head_dim, head_dim),
      /*causal=*/true);
  // Tokens back to their ranks: rank j gets its tokens of this rank's heads.
  TensorList by_tokens;
  for (int j = 0; j < n; ++j) by_tokens.push_back(tokens_of_rank(y, j, n, split, 2));
  return cat(all_to_all(by_tokens, group), 1);  // (B, H, T/N, D): every rank's heads, in rank order
}

}  // namespace loom::parallel
