// linear and embedding: a product with its bias added by the product's
// kernel (addmm), and index_select.
#include "nn/functional.h"
#include "tensor/autocast.h"

namespace loom::nn::functional {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LOOM_CHECK(x.defined() && weight.defined(), "linear: got an undefined tensor");
  LOOM_CHECK(weight.dim() == 2, "linear: weight must be 2-D (out, in), got shape ", weight.shape());
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "linear: input of shape ", x.shape(),
             " does not end in the weight's in_features ", weight.size(1));
  if (autocast_wants_low({x, weight, bias}))
    return linear(autocast_to_low(x), autocast_to_low(weight), autocast_to_low(bias));
  // A bias of another dtype than x promotes, as an addition would.
  if (!bias.defined() || bias.dtype() != x.dtype()) {
    Tensor y = matmul(x, weight.t());
    return bias.defined() ? y + bias : y;
  }
  // (..., in) as rows (M, in): one product for every leading dim.
  std::vector<int64_t> shape = x.shape().vec();
  shape.back() = weight.size(0);
  const Tensor rows = x.dim() == 1 ? x.unsqueeze(0) : x.flatten(0, -2);
  return addmm(bias, rows, weight.t()).reshape(shape);
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  LOOM_CHECK(indices.dtype() == kInt64, "embedding: indices must be int64, got ", indices.dtype());
  LOOM_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.shape());
  std::vector<int64_t> shape = indices.shape().vec();
  shape.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).reshape(shape);
}

}  // namespace loom::nn::functional
