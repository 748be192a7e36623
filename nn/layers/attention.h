// CausalSelfAttention: the attention of a GPT block. One fused projection
// makes queries, keys and values for all heads; each position attends to
// itself and the positions before it.
//
//   nn::CausalSelfAttention attn({.embed_dim = 384, .num_heads = 6});
//   Tensor y = attn->forward(x);     // x (B, T, 384) -> y (B, T, 384)
#pragma once

#include "nn/layers/basic.h"
#include "nn/layers/linear.h"
#include "nn/module.h"

namespace loom::nn {

struct CausalSelfAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;
  bool bias = true;
  double dropout = 0;  // on the output projection
};

class CausalSelfAttentionImpl : public Cloneable<CausalSelfAttentionImpl> {
 public:
  using Options = CausalSelfAttentionOptions;
  explicit CausalSelfAttentionImpl(const CausalSelfAttentionOptions& options);

  void reset() override;
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;
  // The heads in qkv's output `projected` (B, T, 3W), counted from its width,
  // not the options: in tensor parallel qkv yields this rank's heads only.
  int64_t heads_in(const Tensor& projected) const;

  CausalSelfAttentionOptions options;
  Linear qkv{nullptr};   // (C) -> (3C): queries, keys, values of all heads
  Linear proj{nullptr};  // (C) -> (C)
  Dropout dropout{nullptr};
};
LOOM_MODULE(CausalSelfAttention);

}  // namespace loom::nn
