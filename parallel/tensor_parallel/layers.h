// Megatron-style tensor-parallel layers: each of the N ranks of `group`
// holds a slice of the layer's matrices, and the conjugate operators
// (conjugates.h) put the all-reduces where the paper puts them.
//
//   ColumnParallelLinear fc(d, 4 * d, group);   // W's rows split: each rank computes 4d/N outputs
//   RowParallelLinear proj(4 * d, d, group);    // W's columns split: partial sums all-reduced
//   Tensor y = proj->forward(gelu(fc->forward(x)));   // one f, one g: an MLP in tensor parallel
//
// ColumnParallelLinear    y_r = f(x) W_r^T + b_r        (gather_output: all ranks' y_r side by side)
// RowParallelLinear       y = g(x_r W_r^T) + b          (x_r: this rank's slice of the input features)
// ParallelSelfAttention   the heads split across ranks: qkv column-parallel, proj row-parallel
// VocabParallelEmbedding  the vocabulary's rows split; each rank looks up its own ids, g sums
// vocab_parallel_cross_entropy   the loss of column-parallel logits, never gathering them
//
// Every layer can take its slice of an unsharded layer (load_from), which is
// how the tests compare with one device and how a model starts from the
// same weights at any N. Sizes that do not divide by N are an error.
//
// With TokenLayout::kSequenceSharded (sequence parallelism) the activations
// between the layers hold 1/N of the tokens on each rank, and the layers'
// edges change: a column-parallel layer all-gathers its input's tokens, a
// row-parallel layer reduce-scatters its output along the sequence, the
// embedding reduce-scatters its rows (sequence_conjugates.h). A replicated parameter
// used on a rank's tokens only (a row-parallel bias, a norm's scale and
// shift, a position embedding) enters through f: each rank computes its
// tokens' part of the gradient, and f's backward sums them.
#pragma once

#include <memory>

#include "nn/nn.h"
#include "parallel/comm/process_group.h"

namespace loom::parallel {

// How the tokens of the activations between tensor-parallel layers lie:
// every rank holds all of them (Megatron-LM), or its 1/N of the sequence,
// dim 1 of (B, T, C) (Megatron's sequence parallelism).
enum class TokenLayout { kReplicated, kSequenceSharded };

class ColumnParallelLinearImpl : public nn::Module {
 public:
  // `input`: how the tokens of x lie (sharded: all-gathered before the product).
  ColumnParallelLinearImpl(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                           bool bias = true, bool gather_output = false, TokenLayout input = TokenLayout::kReplicated);
  Tensor forward(const Tensor& x) override;
  // Rows [r out/N, (r+1) out/N) of a full Linear(in, out).
  void load_from(const nn::LinearImpl& full);
  // Rows of several stacked matrices at once: the full weight is `parts`
  // blocks of out/parts rows (attention's q, k, v), and this rank takes its
  // slice of each block.
  void load_from(const nn::LinearImpl& full, int parts);

  Tensor weight, bias;  // (out/N, in), (out/N)

 private:
  std::shared_ptr<ProcessGroup> group_;
  bool gather_output_;
  TokenLayout input_;
};
LOOM_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public nn::Module {
 public:
  // `output`: how the tokens of the result lie (sharded: reduce-scattered along the sequence).
  RowParallelLinearImpl(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                        bool bias = true, TokenLayout output = TokenLayout::kReplicated);
  // x: this rank's in/N input features (a column-parallel layer's output).
  Tensor forward(const Tensor& x) override;
  void load_from(const nn::LinearImpl& full);  // columns [r in/N, (r+1) in/N), the whole bias

  Tensor weight, bias;  // (out, in/N), (out)

 private:
  std::shared_ptr<ProcessGroup> group_;
  TokenLayout output_;
};
LOOM_MODULE(RowParallelLinear);

// Causal self-attention with num_heads/N heads per rank: (B, T, C) -> (B, T, C),
// or with `tokens` sharded (B, T/N, C) -> (B, T/N, C), attending over all T.
class ParallelSelfAttentionImpl : public nn::Module {
 public:
  ParallelSelfAttentionImpl(int64_t embed_dim, int64_t num_heads, std::shared_ptr<ProcessGroup> group,
                            double dropout = 0, TokenLayout tokens = TokenLayout::kReplicated);
  Tensor forward(const Tensor& x) override;
  void load_from(const nn::CausalSelfAttentionImpl& full);

  ColumnParallelLinear qkv{nullptr};  // (C) -> (3C/N): this rank's heads' q, k, v
  RowParallelLinear proj{nullptr};    // (C/N) -> (C)
  nn::Dropout dropout{nullptr};

 private:
  int64_t embed_dim_, local_heads_;
  std::shared_ptr<ProcessGroup> group_;
  TokenLayout tokens_;
};
LOOM_MODULE(ParallelSelfAttention);

class VocabParallelEmbeddingImpl : public nn::Module {
 public:
  // `output`: sharded gives this rank's 1/N of the sequence, (B, T) ids -> (B, T/N, dim).
  VocabParallelEmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim, std::shared_ptr<ProcessGroup> group,
                             TokenLayout output = TokenLayout::kReplicated);
  Tensor forward(const Tensor& indices) override;
  void load_from(const nn::EmbeddingImpl& full);

  Tensor weight;  // rows [first, first + num/N) of the vocabulary
  int64_t first = 0;

 private:
  std::shared_ptr<ProcessGroup> group_;
  TokenLayout output_;
};
LOOM_MODULE(VocabParallelEmbedding);

// The layers' computations, on tensors a module already holds (the plans of
// parallel/parallelize.h run a model's own Linear and Embedding modules
// through them). `weight` and `bias` are this rank's slices.
Tensor column_parallel_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::shared_ptr<ProcessGroup>& group, TokenLayout input = TokenLayout::kReplicated,
                              bool gather_output = false);
Tensor row_parallel_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const std::shared_ptr<ProcessGroup>& group, TokenLayout output = TokenLayout::kReplicated);
// `weight`: rows [r num/N, (r+1) num/N) of the vocabulary's.
Tensor vocab_parallel_embedding(const Tensor& indices, const Tensor& weight, const std::shared_ptr<ProcessGroup>& group,
                                TokenLayout output = TokenLayout::kReplicated);

// This rank's slice of a full tensor: rows (a column-parallel weight or
// bias, or an embedding's vocabulary; `parts` stacked blocks each sliced,
// as attention's q, k, v), or columns (a row-parallel weight).
Tensor column_slice(const Tensor& full, int parts, const ProcessGroup& group);
Tensor row_slice(const Tensor& full, const ProcessGroup& group);

// Mean cross-entropy of logits split along the vocabulary (this rank's
// (..., V/N) slice, from a ColumnParallelLinear without gather) against
// targets (...,) over the whole vocabulary. Only scalars per position cross
// ranks: the row maximum, the sum of exponentials, the target's logit. Under
// autocast it runs in float32, as cross_entropy does.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    const std::shared_ptr<ProcessGroup>& group);

// `norm` on activations laid out as `tokens`: sharded, its scale and shift
// enter through f (each rank normalises its own tokens).
Tensor layer_norm_on(nn::LayerNormImpl& norm, const Tensor& x, TokenLayout tokens,
                     const std::shared_ptr<ProcessGroup>& group);

// `dropout` on activations laid out as `tokens`. Sharded, the rank draws the
// mask of the whole sequence, as every rank does when the tokens are
// replicated, and applies its tokens' part: both layouts drop the same
// elements, so with ranks seeded alike they train alike. Ranks that share
// one generator (threads of one process) draw different masks.
Tensor dropout_on(nn::DropoutImpl& dropout, const Tensor& x, TokenLayout tokens, const ProcessGroup& group);

// Of `total` things split over the group: this rank's count, or an error
// naming `what` when the split is uneven.
int64_t per_rank(int64_t total, const ProcessGroup& group, const char* what);

}  // namespace loom::parallel
