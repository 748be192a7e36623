// linear and embedding: compositions of matmul and index_select.
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
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  LOOM_CHECK(indices.dtype() == kInt64, "embedding: indices must be int64, got ", indices.dtype());
  LOOM_CHECK(weight.dim() == 2, "embedding: weight must be 2-D (num_embeddings, dim), got ", weight.shape());
  std::vector<int64_t> shape = indices.shape().vec();
  shape.push_back(weight.size(1));
  return index_select(weight, 0, indices.reshape({-1})).reshape(shape);
}

}  // namespace loom::nn::functional
