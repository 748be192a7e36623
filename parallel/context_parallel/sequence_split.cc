#include "parallel/context_parallel/sequence_split.h"

#include <map>

#include "tensor/error.h"
#include "tensor/generator.h"

namespace loom::parallel {

std::vector<SequenceChunk> chunks_of_rank(int rank, int ranks, int64_t tokens, SequenceSplit split) {
  if (split == SequenceSplit::kContiguous) return {{rank * tokens, tokens}};
  LOOM_CHECK(tokens % 2 == 0, "zig-zag sequence split: a rank's ", tokens, " tokens do not make two equal chunks");
  const int64_t chunk = tokens / 2;
  return {{rank * chunk, chunk}, {(2 * ranks - 1 - rank) * chunk, chunk}};
}

Tensor shard_sequence(const Tensor& x, const ProcessGroup& group, SequenceSplit split, int64_t dim) {
  const int64_t whole = x.size(dim), n = group.size();
  LOOM_CHECK(whole % (split == SequenceSplit::kZigZag ? 2 * n : n) == 0, "shard_sequence: ", whole,
             " tokens do not split ", split == SequenceSplit::kZigZag ? "into two chunks for each of " : "over ", n,
             " ranks");
  return tokens_of_rank(x, group.rank(), static_cast<int>(n), split, dim);
}

Tensor tokens_of_rank(const Tensor& x, int rank, int ranks, SequenceSplit split, int64_t dim) {
  TensorList pieces;
  for (const SequenceChunk& c : chunks_of_rank(rank, ranks, x.size(dim) / ranks, split))
    pieces.push_back(x.narrow(dim, c.first, c.length));
  return pieces.size() == 1 ? pieces[0] : cat(pieces, dim);
}

Tensor sequence_positions(int64_t tokens, const ProcessGroup& group, SequenceSplit split, Device device) {
  TensorList pieces;
  for (const SequenceChunk& c : chunks_of_rank(group.rank(), group.size(), tokens, split))
    pieces.push_back(arange(static_cast<double>(c.first), static_cast<double>(c.first + c.length), 1,
                            {.dtype = kInt64, .device = device}));
  return pieces.size() == 1 ? pieces[0] : cat(pieces, 0);
}

Tensor in_sequence_order(const Tensor& gathered, const ProcessGroup& group, SequenceSplit split, int64_t dim) {
  if (split == SequenceSplit::kContiguous) return gathered;
  const int n = group.size();
  const int64_t tokens = gathered.size(dim) / n;
  std::map<int64_t, Tensor> by_position;  // every rank's chunks, by where they start in the sequence
  for (int r = 0; r < n; ++r) {
    int64_t at = r * tokens;  // rank r's tokens in the gathered tensor, its chunks side by side
    for (const SequenceChunk& c : chunks_of_rank(r, n, tokens, split)) {
      by_position[c.first] = gathered.narrow(dim, at, c.length);
      at += c.length;
    }
  }
  TensorList chunks;
  for (const auto& [first, chunk] : by_position) chunks.push_back(chunk);
  return cat(chunks, dim);
}

void check_ranks_draw_alike(const char* model, double p, const ProcessGroup& group) {
  if (p == 0) return;  // the common case, on every forward of a parallel layer: no name lookup
  const bool rank_threads = group.size() > 1 && group.backend().rfind("threads", 0) == 0;
  LOOM_CHECK(p == 0 || !rank_threads || thread_has_own_default_generator(), model, ": dropout ", p,
             " in training over ", group.size(), " rank threads needs each to draw as a process would: hold a ",
             "ThreadDefaultGenerator on each rank thread, seeded alike (tensor/generator.h), or run one process ",
             "per rank (mpirun); sharing the process's generator, the ranks' masks would differ");
}

Tensor dropout_on_shard(nn::DropoutImpl& dropout, const Tensor& x, const ProcessGroup& group, SequenceSplit split) {
  const double p = dropout.options.p;
  if (!dropout.is_training() || p == 0) return x;
  LOOM_CHECK(x.dim() >= 2, "dropout_on_shard: expected tokens along dim 1, got shape ", x.shape());
  check_ranks_draw_alike("dropout on a share of the sequence", p, group);  // every caller's condition
  if (p == 1) return x * 0.0;
  Shape whole = x.shape();
  whole[1] *= group.size();
  const Tensor keep = shard_sequence(bernoulli(whole, 1 - p, x.options()), group, split);
  return x * (keep * (1.0 / (1 - p)));  // as functional::dropout computes it
}

}  // namespace loom::parallel
