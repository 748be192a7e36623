#include "nn/layers/attention.h"

#include "nn/functional.h"

namespace loom::nn {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const CausalSelfAttentionOptions& o)
    : Cloneable("CausalSelfAttention"), options(o) {
  LOOM_CHECK(o.embed_dim > 0 && o.num_heads > 0 && o.embed_dim % o.num_heads == 0,
             "CausalSelfAttention: embed_dim ", o.embed_dim, " must be a positive multiple of num_heads ",
             o.num_heads);
  reset();
}

void CausalSelfAttentionImpl::reset() {
  const int64_t c = options.embed_dim;
  qkv = register_module("qkv", Linear(LinearOptions{c, 3 * c, options.bias}));
  proj = register_module("proj", Linear(LinearOptions{c, c, options.bias}));
  dropout = register_module("dropout", Dropout(options.dropout));
}

int64_t CausalSelfAttentionImpl::heads_in(const Tensor& projected) const {
  return projected.size(-1) / 3 / (options.embed_dim / options.num_heads);
}

Tensor CausalSelfAttentionImpl::forward(const Tensor& x) {
  if (forward_override()) return forward_override()(x);
  LOOM_CHECK(x.dim() == 3 && x.size(2) == options.embed_dim, "CausalSelfAttention: expected input (B, T, ",
             options.embed_dim, "), got ", x.shape());
  // In tensor parallel qkv yields this rank's heads only (3W of the 3C), and
  // with the tokens sharded it gathers them (T here may exceed x's).
  const Tensor projected = qkv->forward(x);
  const int64_t b = projected.size(0), t = projected.size(1), width = projected.size(2) / 3;
  const int64_t heads = heads_in(projected), head_dim = width / heads;
  TensorList qkv_parts = split(projected, width, 2);  // three (B, T, W)
  // (B, T, W) -> (B, heads, T, head_dim)
  auto by_head = [&](const Tensor& z) { return z.reshape({b, t, heads, head_dim}).transpose(1, 2); };
  Tensor y = functional::scaled_dot_product_attention(by_head(qkv_parts[0]), by_head(qkv_parts[1]),
                                                      by_head(qkv_parts[2]), /*causal=*/true);
  y = y.transpose(1, 2).reshape({b, t, width});  // heads side by side again
  return dropout->forward(proj->forward(y));
}

void CausalSelfAttentionImpl::pretty_print(std::ostream& out) const {
  out << "CausalSelfAttention(embed_dim=" << options.embed_dim << ", num_heads=" << options.num_heads << ")";
}

}  // namespace loom::nn
