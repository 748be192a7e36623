// Scaled dot-product attention, composed from matmul, masking and softmax.
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
  // att: (..., Tq, Tk)
  Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(-1))));
  if (causal) {
    LOOM_CHECK(tq == tk, "scaled_dot_product_attention: causal attention needs as many queries as keys, got ", tq,
               " and ", tk);
    Tensor rows = arange(tq, {.dtype = kInt64, .device = q.device()});
    Tensor future = rows.unsqueeze(0) > rows.unsqueeze(1);  // key position after the query's
    att = masked_fill(att, future, -INFINITY);
  }
  return matmul(softmax(att, -1), v);
}

}  // namespace loom::nn::functional
