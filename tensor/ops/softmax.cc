// softmax and log_softmax along one dim, and attention's scaled (and causal)
// softmax: one fused kernel each way.
#include <cmath>

#include "tensor/autocast.h"
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

Tensor softmax_impl(const char* op, const Tensor& x_in, int64_t dim_in, const SoftmaxParams& p) {
  detail::check_defined(op, x_in);
  Tensor x = is_floating(x_in.dtype()) ? x_in : detail::cast_raw(x_in, kFloat32);
  const int dim = wrap_dim(dim_in, x.dim(), op);
  Tensor in = x.is_contiguous() ? x : contiguous_copy(x);
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0) backend_for(x.device()).softmax(in, x.dim() == 0 ? 0 : dim, p, y);
  if (autograd::needs_grad(x_in))
    autograd::record(p.log ? "LogSoftmaxBackward" : "SoftmaxBackward", {x_in}, y,
                     [sy = autograd::SavedTensor(y), dim, p](const TensorList& g) {
                       const Tensor& y = sy.get();
                       Tensor dy = g[0].is_contiguous() ? g[0] : contiguous_copy(g[0]);
                       Tensor dx = empty(y.shape(), y.options());
                       if (dx.numel() > 0) backend_for(y.device()).softmax_backward(y, dy, dim, p, dx);
                       return TensorList{dx};
                     });
  return y;
}

// Under autocast, softmax and log_softmax run in float32 (16-bit inputs cast up), as PyTorch's.
Tensor in_autocast_dtype(const Tensor& x) { return autocast_wants_float32({x}) ? autocast_to_float32(x) : x; }

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl("softmax", in_autocast_dtype(x), dim, {}); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl("log_softmax", in_autocast_dtype(x), dim, {.log = true});
}

// Attention's scores stay in their dtype under autocast: the kernel computes
// in float32 and rounds once, so a cast up before it and down after it (for
// the product with v) would add four passes over the T x T scores each way
// and change nothing but the weights' rounding (PyTorch's fused attention
// never holds them in float32 either).
Tensor attention_softmax(const Tensor& scores, double scale, bool causal) {
  detail::check_defined("attention_softmax", scores);
  LOOM_CHECK(scale > 0 && std::isfinite(scale), "attention_softmax: scale must be positive and finite, got ", scale);
  LOOM_CHECK(scores.dim() >= 2 && (!causal || scores.size(-1) == scores.size(-2)),
             "attention_softmax: ", causal ? "causal attention needs scores (..., T, T), got " :
             "expected scores (..., T_q, T_k), got ", scores.shape());
  return softmax_impl("attention_softmax", scores, -1, {.scale = scale, .causal = causal});
}

}  // namespace loom
