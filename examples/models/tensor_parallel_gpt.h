// models::GPT in tensor parallel (Megatron-LM's layout) over the ranks of a
// group: each block's attention heads and MLP width, the token embedding's
// vocabulary and the head's output vocabulary are split across the ranks;
// LayerNorms and position embeddings are replicated. Per block one all-reduce
// in attention and one in the MLP, forward and backward alike.
//
//   models::GPT full(config);                          // the same seed on every rank
//   models::TensorParallelGPT tp(config, group);
//   tp->load_from(*full);                              // each rank takes its slices
//   Tensor loss = tp->loss(idx, targets);              // logits never gathered
//   loss.backward();
//
// With TokenLayout::kSequenceSharded (sequence parallelism) each all-reduce
// becomes a reduce-scatter and an all-gather around the layer norms,
// residual adds and dropouts, which then run on 1/N of the tokens: the same
// bytes, 1/N of those activations. The sequence (and block_size) must divide
// by N; every rank still takes the whole batch, and gets the same loss.
#pragma once

#include <memory>

#include "examples/models/models.h"
#include "parallel/comm/process_group.h"
#include "parallel/tensor_parallel/layers.h"

namespace loom::models {

class TensorParallelBlockImpl : public nn::Module {
 public:
  TensorParallelBlockImpl(const GPTConfig& config, std::shared_ptr<parallel::ProcessGroup> group,
                          parallel::TokenLayout tokens = parallel::TokenLayout::kReplicated);
  Tensor forward(const Tensor& x) override;
  void load_from(const BlockImpl& full);

  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  parallel::ParallelSelfAttention attn{nullptr};
  parallel::ColumnParallelLinear fc{nullptr};
  parallel::RowParallelLinear proj{nullptr};
  nn::Dropout dropout{nullptr};

 private:
  std::shared_ptr<parallel::ProcessGroup> group_;
  parallel::TokenLayout tokens_;
};
LOOM_MODULE(TensorParallelBlock);

class TensorParallelGPTImpl : public nn::Module {
 public:
  TensorParallelGPTImpl(const GPTConfig& config, std::shared_ptr<parallel::ProcessGroup> group,
                        parallel::TokenLayout tokens = parallel::TokenLayout::kReplicated);
  // idx (B, T) -> this rank's logits (B, T, vocab/N), every token's.
  Tensor forward(const Tensor& idx) override;
  // All the logits (B, T, vocab), gathered (for evaluation and sampling).
  Tensor full_logits(const Tensor& idx);
  // Mean next-token cross-entropy against targets (B, T), from the split logits.
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // Every rank draws the same tokens. `drawn`: only the first `drawn` tokens
  // of the vocabulary are drawn (0: all), for a vocabulary padded to a
  // multiple of the ranks.
  Tensor generate(Tensor idx, int64_t count, double temperature = 1.0, Generator* generator = nullptr,
                  int64_t drawn = 0);
  void load_from(const GPTImpl& full);
  parallel::TokenLayout tokens() const { return tokens_; }
  const std::shared_ptr<parallel::ProcessGroup>& group() const { return group_; }
  // The parameters each rank holds a slice of, and those every rank holds whole.
  TensorList sharded_parameters() const;
  TensorList replicated_parameters() const;
  // clip_grad_norm_ over the whole model: the sharded parameters' squares
  // summed over the ranks, the replicated ones' counted once.
  Tensor clip_grad_norm_(double max_norm);

  GPTConfig config;
  parallel::VocabParallelEmbedding wte{nullptr};
  nn::Embedding wpe{nullptr};
  nn::Dropout dropout{nullptr};
  nn::ModuleList blocks{nullptr};
  nn::LayerNorm ln_f{nullptr};
  parallel::ColumnParallelLinear head{nullptr};

 private:
  std::shared_ptr<parallel::ProcessGroup> group_;
  parallel::TokenLayout tokens_;
};
LOOM_MODULE(TensorParallelGPT);

}  // namespace loom::models
