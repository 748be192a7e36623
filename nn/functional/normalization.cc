// layer_norm (one fused kernel each way) and batch_norm (composed from
// reductions, with the running statistics updated in place).
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/autocast.h"

namespace loom::nn::functional {

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  LOOM_CHECK(x.defined(), "layer_norm: got an undefined tensor");
  if (autocast_wants_float32({x, weight, bias}))
    return layer_norm(autocast_to_float32(x), normalized_shape, autocast_to_float32(weight),
                      autocast_to_float32(bias), eps);
  LOOM_CHECK(is_floating(x.dtype()), "layer_norm: expected a floating-point input, got ", x.dtype());
  const int k = static_cast<int>(normalized_shape.size());
  bool trailing_match = k >= 1 && k <= x.dim();
  for (int i = 0; trailing_match && i < k; ++i) trailing_match = x.size(x.dim() - k + i) == normalized_shape[i];
  LOOM_CHECK(trailing_match, "layer_norm: normalized_shape ", Shape(normalized_shape),
             " does not match the trailing dims of the input ", x.shape());
  for (const Tensor* p : {&weight, &bias})
    LOOM_CHECK(!p->defined() || (p->shape() == Shape(normalized_shape) && p->dtype() == x.dtype() &&
                                  p->device() == x.device()),
               "layer_norm: weight and bias must have shape ", Shape(normalized_shape), ", dtype ", x.dtype(),
               " and device ", x.device(), "; got ", p->shape(), " ", p->dtype(), " on ", p->device());
  // The kernel sees (rows, cols) views: each row is normalised on its own.
  const int64_t cols = numel(Shape(normalized_shape)), rows = x.numel() / cols;
  const Shape rows_cols{rows, cols};
  auto as_rows = [&](const Tensor& t) { return as_strided(t, rows_cols, contiguous_strides(rows_cols), t.storage_offset()); };
  auto flat = [&](const Tensor& t) {
    return t.defined() ? as_strided(contiguous_copy(t), {cols}, {1}, 0) : Tensor();
  };
  Tensor xc = as_rows(x.is_contiguous() ? x : contiguous_copy(x));
  Tensor w = flat(weight), b = flat(bias);
  Tensor y = empty(x.shape(), x.options());
  // The statistics stay in float32 for 16-bit inputs, as PyTorch keeps them:
  // the backward rebuilds x's normalised values from them, and a bfloat16
  // mean of 100 is off by up to 0.25, a quarter of a unit deviation.
  TensorOptions stats_options = x.options();
  if (is_16bit_floating(x.dtype())) stats_options.dtype = kFloat32;
  Tensor mean = empty({rows}, stats_options), rstd = empty({rows}, stats_options);
  if (x.numel() > 0) backend_for(x.device()).layer_norm(xc, w, b, eps, as_rows(y), mean, rstd);
  // Selective (autograd/node.h): a zero-bubble pipeline asks for dx first
  // and for the scale's and shift's gradients (two column sums) later.
  if (autograd::needs_grad({x, weight, bias}))
    autograd::record_selective(
        "LayerNormBackward", {x, weight, bias}, {y},
        [sx = autograd::SavedTensor(xc), w, mean, rstd, need_x = x.requires_grad(),
         need_w = weight.defined() && weight.requires_grad(), need_b = bias.defined() && bias.requires_grad(),
         wshape = Shape(normalized_shape)](const TensorList& g, const autograd::InputMask& wanted) {
          const Tensor& x = sx.get();  // (rows, cols)
          Tensor dy = g[0].is_contiguous() ? g[0] : contiguous_copy(g[0]);
          auto as_x = [&](const Tensor& t) {
            return t.defined() ? as_strided(t, x.shape(), x.strides(), t.storage_offset()) : Tensor();
          };
          Tensor dx = need_x && autograd::wants(wanted, 0) ? empty(g[0].shape(), x.options()) : Tensor();
          Tensor dw = need_w && autograd::wants(wanted, 1) ? empty(wshape, x.options()) : Tensor();
          Tensor db = need_b && autograd::wants(wanted, 2) ? empty(wshape, x.options()) : Tensor();
          auto flat = [](const Tensor& t) { return t.defined() ? as_strided(t, {t.numel()}, {1}, 0) : Tensor(); };
          if (dx.defined() || dw.defined() || db.defined())
            backend_for(x.device()).layer_norm_backward(as_x(dy), x, w, mean, rstd, as_x(dx), flat(dw), flat(db));
          return TensorList{dx, dw, db};
        });
  return y;
}

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  LOOM_CHECK(x.defined() && x.dim() >= 2, "batch_norm: expected an input of shape (N, C, ...), got ",
             x.defined() ? x.shape() : Shape{});
  if (autocast_wants_float32({x, weight, bias}))
    return batch_norm(autocast_to_float32(x), running_mean, running_var, autocast_to_float32(weight),
                      autocast_to_float32(bias), training, momentum, eps);
  const int64_t channels = x.size(1);
  const Shape per_channel{channels};
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias}) {
    LOOM_CHECK(!t->defined() || t->shape() == per_channel, "batch_norm: per-channel tensors must have shape ",
               per_channel, ", got ", t->shape());
    // Checked here, not by the ops below: the running statistics are
    // scaled in place before the first op that would see the mismatch.
    LOOM_CHECK(!t->defined() || t->device() == x.device(), "batch_norm: the input is on ", x.device(),
               " but a per-channel tensor (weight, bias or running statistics) is on ", t->device());
  }
  // (1, C, 1, ...) so that per-channel values broadcast against x.
  std::vector<int64_t> channel_shape(x.dim(), 1);
  channel_shape[1] = channels;
  std::vector<int64_t> dims;
  for (int d = 0; d < x.dim(); ++d)
    if (d != 1) dims.push_back(d);

  Tensor mean, var;
  if (training) {
    const int64_t count = x.numel() / channels;
    LOOM_CHECK(count > 1, "batch_norm: training needs more than one value per channel, got input ", x.shape());
    mean = loom::mean(x, dims, /*keepdim=*/true);
    var = loom::var(x, dims, /*correction=*/0, /*keepdim=*/true);
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      running_mean.mul_(1 - momentum).add_(mean.reshape({channels}).to(running_mean.dtype()), momentum);
      // The running variance is the unbiased estimate, as in PyTorch.
      running_var.mul_(1 - momentum)
          .add_((var.reshape({channels}) * (static_cast<double>(count) / (count - 1))).to(running_var.dtype()), momentum);
    }
  } else {
    LOOM_CHECK(running_mean.defined() && running_var.defined(),
               "batch_norm: evaluation mode needs running_mean and running_var");
    mean = running_mean.reshape(channel_shape);
    var = running_var.reshape(channel_shape);
  }
  Tensor y = (x - mean) * rsqrt(var + eps);
  if (weight.defined()) y = y * weight.reshape(channel_shape);
  if (bias.defined()) y = y + bias.reshape(channel_shape);
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  LOOM_CHECK(p >= 0 && p <= 1, "dropout: p must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  if (p == 1) return x * 0.0;
  Tensor keep = bernoulli(x.shape(), 1 - p, x.options(), generator);
  return x * (keep * (1.0 / (1 - p)));
}

}  // namespace loom::nn::functional
