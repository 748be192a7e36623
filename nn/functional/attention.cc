// Scaled dot-product attention: two matmuls around attention_softmax,
// which scales, masks and normalises the scores in one pass each way.
#include <cmath>

#include "nn/functional.h"

namespace loom::nn::functional {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  LOOM_CHECK(q.defined() && k.defined() && v.defined(), "scaled_dot_product_attention: got an undefined tensor");
  LOOM_CHECK(q.dim() >= 2 && q.dim() == k.dim() && k.dim() == v.dim(),
             "scaled_dot_product_attention: q, k, v must have the same number of dims (..., T, D), got ", q.shape(),
             ", ", k.shape(), ", ", v.shape());
  LOOM_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
             "scaled_dot_product_attention: shapes q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
             " do not fit together");
  const int64_t tq = q.size(-2), tk = k.size(-2);
  LOOM_CHECK(!causal || tq == tk, "scaled_dot_product_attention: causal attention needs as many queries as keys, got ",
             tq, " and ", tk);
  // att: (..., Tq, Tk), scaled, masked to the past when causal, and
  // normalised in one pass (attention_softmax).
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  return matmul(attention_softmax(matmul(q, k.transpose(-2, -1)), scale, causal), v);
}

}  // namespace loom::nn::functional
