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

Tensor CausalSelfAttentionImpl::forward(const Tensor& x) {
  LOOM_CHECK(x.dim() == 3 && x.size(2) == options.embed_dim, "CausalSelfAttention: expected input (B, T, ",
             options.embed_dim, "), got ", x.shape());
  const int64_t b = x.size(0), t = x.size(1), c = options.embed_dim, heads = options.num_heads;
  TensorList qkv_parts = split(qkv->forward(x), c, 2);  // three (B, T, C)
  // (B, T, C) -> (B, heads, T, C / heads)
  auto by_head = [&](const Tensor& z) { return z.reshape({b, t, heads, c / heads}).transpose(1, 2); };
  Tensor y = functional::scaled_dot_product_attention(by_head(qkv_parts[0]), by_head(qkv_parts[1]),
                                                      by_head(qkv_parts[2]), /*causal=*/true);
  y = y.transpose(1, 2).reshape({b, t, c});  // heads side by side again
  return dropout->forward(proj->forward(y));
}

void CausalSelfAttentionImpl::pretty_print(std::ostream& out) const {
  out << "CausalSelfAttention(embed_dim=" << options.embed_dim << ", num_heads=" << options.num_heads << ")";
}

}  // namespace loom::nn
