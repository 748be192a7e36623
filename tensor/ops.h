// Every tensor op, as free functions (most also exist as Tensor methods).
//
// Ops broadcast like NumPy, promote dtypes like PyTorch (bool < uint8 < int64
// < float32 < float64; a scalar takes the tensor's dtype), check their
// arguments once (throwing loom::Error that names the op and the shapes,
// dtypes or devices), and record themselves for autograd when an input
// requires grad. Each op's forward and backward live together in tensor/ops/.
//
//   Tensor y = relu(matmul(x, w) + b);
//   Tensor p = softmax(y, -1);
//   Tensor loss = -(log(p) * target).sum(std::vector<int64_t>{1}).mean();
#pragma once

#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/tensor.h"

namespace loom {

// ---- unary (elementwise.cc); integer inputs of float ops are promoted to float32 ----
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sign(const Tensor& x);  // no gradient
Tensor reciprocal(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor clamp(const Tensor& x, double min, double max);
Tensor logical_not(const Tensor& x);

// ---- activations (elementwise.cc) ----
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
enum class GeluApproximation { None, Tanh };  // None: the exact erf form
Tensor gelu(const Tensor& x, GeluApproximation approximate = GeluApproximation::None);

// ---- binary, with broadcasting (binary.cc) ----
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1);  // a - alpha * b
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: integers give float32
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor lerp(const Tensor& a, const Tensor& b, double weight);  // a + weight * (b - a)

// Comparisons and logic give bool tensors; no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
// True where |a - b| <= atol + rtol * |b| (NaN never close).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);

// ---- selection (indexing.cc) ----
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);  // broadcasts all three
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);
// Rows of x along `dim` picked by a 1-D int64 index (an embedding lookup).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[index[i][j]][j] for dim 0 (PyTorch's gather).
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// A copy of x with src added at the positions index names along dim.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// A copy of x with src's rows added at rows `index` along dim.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// ---- reductions (reduction.cc); empty dims means all dims ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Variance with Bessel's `correction` (1: unbiased, as torch.var; 0: population).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);

// ---- softmax (softmax.cc), one fused pass per row ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// softmax(scale * scores, -1) for attention scores (..., T_q, T_k), scale > 0.
// With `causal` (T_q == T_k), query q sees keys k <= q only: the others get
// probability 0, as masked_fill(-inf) before the softmax gives. Scale and
// mask ride in the softmax's own pass each way (no scaled copy, no mask).
Tensor attention_softmax(const Tensor& scores, double scale, bool causal);

// ---- matrix products (matmul.cc) ----
Tensor mm(const Tensor& a, const Tensor& b);   // (M, K) @ (K, N)
Tensor bmm(const Tensor& a, const Tensor& b);  // (B, M, K) @ (B, K, N)
// bias + a @ b, as torch.addmm: a (M, K), b (K, N), bias broadcast to (M, N).
// A bias row (N) is added by the product's kernel (on CUDA, cuBLASLt's
// epilogue when preferred_blas_library() is kCublasLt: tensor/blas_library.h).
Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b);
// NumPy matmul: 1-D, 2-D and batched operands, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- joining and splitting (join.cc) ----
Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
// The slices along dim, each without that dim (x[0], x[1], ... for dim 0).
TensorList unbind(const Tensor& x, int64_t dim = 0);

}  // namespace loom
