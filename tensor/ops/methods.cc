// Tensor's math methods: each calls the free function of the same name.
#include "autograd/engine.h"
#include "tensor/ops.h"

namespace loom {

Tensor Tensor::neg() const { return loom::neg(*this); }
Tensor Tensor::exp() const { return loom::exp(*this); }
Tensor Tensor::log() const { return loom::log(*this); }
Tensor Tensor::sqrt() const { return loom::sqrt(*this); }
Tensor Tensor::rsqrt() const { return loom::rsqrt(*this); }
Tensor Tensor::abs() const { return loom::abs(*this); }
Tensor Tensor::square() const { return loom::square(*this); }
Tensor Tensor::tanh() const { return loom::tanh(*this); }
Tensor Tensor::sigmoid() const { return loom::sigmoid(*this); }
Tensor Tensor::relu() const { return loom::relu(*this); }
Tensor Tensor::pow(double exponent) const { return loom::pow(*this, exponent); }
Tensor Tensor::clamp(double min, double max) const { return loom::clamp(*this, min, max); }
Tensor Tensor::matmul(const Tensor& other) const { return loom::matmul(*this, other); }
Tensor Tensor::sum() const { return loom::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const { return loom::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return loom::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const { return loom::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return loom::amax(*this); }
Tensor Tensor::max(const std::vector<int64_t>& dims, bool keepdim) const { return loom::amax(*this, dims, keepdim); }
Tensor Tensor::min() const { return loom::amin(*this); }
Tensor Tensor::min(const std::vector<int64_t>& dims, bool keepdim) const { return loom::amin(*this, dims, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return loom::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return loom::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const std::vector<int64_t>& dims, int64_t correction, bool keepdim) const {
  return loom::var(*this, dims, correction, keepdim);
}
Tensor Tensor::softmax(int64_t dim) const { return loom::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return loom::log_softmax(*this, dim); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return loom::masked_fill(*this, mask, value); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return loom::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return loom::gather(*this, dim, index); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, gradient.defined() ? TensorList{gradient} : TensorList{}, retain_graph);
}

}  // namespace loom
