#include "parallel/context_parallel/ring_attention.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "nn/functional.h"
#include "parallel/context_parallel/attention.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace loom::parallel {
namespace {

// The tags of the ring's messages: a block of keys and values (forward and
// backward), and the gradient that travels with it in backward.
constexpr int kBlockTag = 7101;
constexpr int kBlockGradientTag = 7102;

// One chunk of a rank's tokens: where it lies in the sequence, and where in
// the rank's tensors (dim 2).
struct LocalChunk {
  SequenceChunk tokens;
  int64_t at;
};

std::vector<LocalChunk> local_chunks(int rank, int ranks, int64_t tokens, SequenceSplit split) {
  std::vector<LocalChunk> local;
  int64_t at = 0;
  for (const SequenceChunk& c : chunks_of_rank(rank, ranks, tokens, split)) {
    local.push_back({c, at});
    at += c.length;
  }
  return local;
}

// Calls visit(i, queries[i], key chunk, causal) for each pair of a query
// chunk and a key chunk in which the queries see keys: chunks of keys before
// the queries' (all of them seen) and the queries' own (causal). The chunks
// are all one length, so no other pair sees anything.
template <typename Visit>
void for_each_visible_pair(const std::vector<LocalChunk>& queries, const std::vector<LocalChunk>& keys, Visit visit) {
  for (size_t i = 0; i < queries.size(); ++i)
    for (const LocalChunk& key : keys)
      if (key.tokens.first <= queries[i].tokens.first)
        visit(i, queries[i], key, /*causal=*/key.tokens.first == queries[i].tokens.first);
}

// A chunk's rows of a (B, H, T/N, ...) tensor.
Tensor rows_of(const Tensor& t, const LocalChunk& c) { return t.narrow(2, c.at, c.tokens.length); }

// One step round the ring: `block` sent to the next rank, the previous
// rank's arriving in a tensor of the same shape.
class Passing {
 public:
  Passing(const Tensor& block, ProcessGroup& group, int tag) : arriving_(empty_like(block)) {
    const int n = group.size(), next = (group.rank() + 1) % n, previous = (group.rank() + n - 1) % n;
    sent_ = group.send(block, next, tag);
    received_ = group.recv(arriving_, previous, tag);
  }
  // The previous rank's block, once it has arrived (and this rank's has gone).
  Tensor wait() const {
    sent_->wait();
    received_->wait();
    return arriving_;
  }

 private:
  Tensor arriving_;
  WorkPtr sent_, received_;
};

// Where blocks are summed: float32 for 16-bit inputs, which would round at every block.
DType accumulation_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// A query chunk's output over the blocks so far, and its rows' logsumexp.
struct Merged {
  Tensor out, logsumexp;
};

// Merges a block's output into the chunk's: each side weighted by its share
// of the two's softmax mass, exp(its logsumexp - the merged one).
void merge(std::optional<Merged>& merged, const nn::functional::AttentionBlock& block, DType dtype) {
  const Tensor out = block.out.to(dtype);
  if (!merged) {
    merged = Merged{out, block.logsumexp};
    return;
  }
  const Tensor difference = block.logsumexp - merged->logsumexp;
  merged->out.addcmul_(out - merged->out, sigmoid(difference).unsqueeze(-1));  // the block's share: sigmoid(difference)
  merged->logsumexp = maximum(merged->logsumexp, block.logsumexp) + log(exp(-abs(difference)) + 1.0);
}

struct RingForward {
  Tensor out;                    // (B, H, T/N, D) in q's dtype
  TensorList chunk_logsumexps;   // (B, H, L) a query chunk, contiguous: as the backward's kernels read them
};

RingForward ring_forward(const Tensor& q, const Tensor& k, const Tensor& v, ProcessGroup& group, SequenceSplit split) {
  const int n = group.size(), rank = group.rank();
  const int64_t tokens = q.size(2), head_dim = k.size(3);
  const std::vector<LocalChunk> mine = local_chunks(rank, n, tokens, split);
  std::vector<std::optional<Merged>> merged(mine.size());
  Tensor block = cat({k, v}, 3);  // keys and values side by side: one message a step
  for (int step = 0; step < n; ++step) {
    const int owner = (rank + n - step) % n;
    std::optional<Passing> next;
    if (step + 1 < n) next.emplace(block, group, kBlockTag);
    const Tensor keys = block.narrow(3, 0, head_dim), values = block.narrow(3, head_dim, head_dim);
    for_each_visible_pair(mine, local_chunks(owner, n, tokens, split),
                          [&](size_t i, const LocalChunk& queries, const LocalChunk& seen, bool causal) {
                            merge(merged[i],
                                  nn::functional::attention_block(rows_of(q, queries), rows_of(keys, seen),
                                                                  rows_of(values, seen), causal),
                                  accumulation_dtype(q.dtype()));
                          });
    if (next) block = next->wait();
  }
  TensorList outs, chunk_logsumexps;
  for (const std::optional<Merged>& m : merged) {  // every chunk sees its own tokens, so each has a value
    outs.push_back(m->out);
    chunk_logsumexps.push_back(m->logsumexp);
  }
  return {cat(outs, 2).to(q.dtype()), chunk_logsumexps};
}

// dq, dk and dv of this rank's q, k and v, from the gradient dout of the
// output `out` and its query chunks' logsumexps.
TensorList ring_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const TensorList& chunk_logsumexps, const Tensor& dout, ProcessGroup& group,
                         SequenceSplit split) {
  const int n = group.size(), rank = group.rank();
  const int64_t tokens = q.size(2), head_dim = k.size(3);
  const DType dtype = accumulation_dtype(q.dtype());
  const std::vector<LocalChunk> mine = local_chunks(rank, n, tokens, split);
  Tensor dq = zeros(q.shape(), {.dtype = dtype, .device = q.device()});
  Tensor block = cat({k, v}, 3);
  std::optional<Passing> arriving_gradient;  // the gradient of the block this rank holds next, from the ranks before
  Tensor gradient;                            // of the block this rank holds, this rank's share
  for (int step = 0; step < n; ++step) {
    const int owner = (rank + n - step) % n;
    std::optional<Passing> next;
    if (step + 1 < n) next.emplace(block, group, kBlockTag);
    const Tensor keys = block.narrow(3, 0, head_dim), values = block.narrow(3, head_dim, head_dim);
    gradient = zeros(block.shape(), {.dtype = dtype, .device = block.device()});
    const Tensor dkeys = gradient.narrow(3, 0, head_dim), dvalues = gradient.narrow(3, head_dim, head_dim);
    for_each_visible_pair(mine, local_chunks(owner, n, tokens, split),
                          [&](size_t i, const LocalChunk& queries, const LocalChunk& seen, bool causal) {
                            const TensorList g = nn::functional::attention_block_backward(
                                rows_of(q, queries), rows_of(keys, seen), rows_of(values, seen),
                                rows_of(out, queries), chunk_logsumexps[i], rows_of(dout, queries), causal);
                            rows_of(dq, queries).add_(g[0].to(dtype));
                            rows_of(dkeys, seen).add_(g[1].to(dtype));
                            rows_of(dvalues, seen).add_(g[2].to(dtype));
                          });
    if (n == 1) break;
    // The ranks before have added their shares of this block; add this one's and hand it on. After
    // the last step the next rank is the block's owner.
    if (arriving_gradient) gradient.add_(arriving_gradient->wait());
    arriving_gradient.emplace(gradient, group, kBlockGradientTag);
    if (next) block = next->wait();
  }
  const Tensor own = n == 1 ? gradient : arriving_gradient->wait();
  return {dq.to(q.dtype()), own.narrow(3, 0, head_dim).to(k.dtype()),
          own.narrow(3, head_dim, head_dim).to(v.dtype())};
}

}  // namespace

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::shared_ptr<ProcessGroup>& group,
                      SequenceSplit split) {
  check_shards("ring_attention", q, k, v, group);
  RingForward forward;
  {
    NoGradGuard no_grad;
    forward = ring_forward(q, k, v, *group, split);
  }
  if (autograd::needs_grad({q, k, v}))
    autograd::record("RingAttentionBackward", {q, k, v}, forward.out,
                     [group, split, chunk_logsumexps = forward.chunk_logsumexps, sq = autograd::SavedTensor(q),
                      sk = autograd::SavedTensor(k), sv = autograd::SavedTensor(v),
                      so = autograd::SavedTensor(forward.out)](const TensorList& g) {
                       NoGradGuard no_grad;
                       return ring_backward(sq.get(), sk.get(), sv.get(), so.get(), chunk_logsumexps, g[0], *group,
                                            split);
                     });
  return forward.out;
}

}  // namespace loom::parallel
