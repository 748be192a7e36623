// conv2d: the convolution kernel (bias included) and its backward products;
// conv2d_relu: the same with a ReLU fused into the kernel's passes.
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/autocast.h"
#include "tensor/flop_counter.h"

namespace loom::nn::functional {
namespace {

Tensor contiguous_raw(const Tensor& t) { return t.is_contiguous() ? t : contiguous_copy(t); }

// conv2d, or conv2d_relu when p.relu.
Tensor convolve(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  LOOM_CHECK(x.defined() && weight.defined(), "conv2d: got an undefined tensor");
  if (autocast_wants_low({x, weight, bias}))
    return convolve(autocast_to_low(x), autocast_to_low(weight), autocast_to_low(bias), p);
  LOOM_CHECK(x.dim() == 4, "conv2d: expected a 4-D input (N, C, H, W), got shape ", x.shape());
  LOOM_CHECK(weight.dim() == 4, "conv2d: expected a 4-D weight (C_out, C_in / groups, kH, kW), got shape ",
             weight.shape());
  LOOM_CHECK(x.device() == weight.device(), "conv2d: input on ", x.device(), " but weight on ", weight.device());
  LOOM_CHECK(x.dtype() == weight.dtype() && is_floating(x.dtype()), "conv2d: input ", x.dtype(), " and weight ",
             weight.dtype(), " must be the same floating-point dtype");
  LOOM_CHECK(p.groups >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1 &&
                 p.pad_h >= 0 && p.pad_w >= 0,
             "conv2d: strides, dilations and groups must be positive and padding non-negative");
  LOOM_CHECK(x.size(1) == weight.size(1) * p.groups, "conv2d: input has ", x.size(1),
             " channels, but the weight expects ", weight.size(1) * p.groups, " (", weight.size(1), " x ", p.groups,
             " groups); weight shape ", weight.shape());
  LOOM_CHECK(weight.size(0) % p.groups == 0, "conv2d: ", weight.size(0), " output channels do not divide into ",
             p.groups, " groups");
  const int64_t ho = window_output_size(x.size(2), weight.size(2), p.stride_h, p.pad_h, p.dilation_h);
  const int64_t wo = window_output_size(x.size(3), weight.size(3), p.stride_w, p.pad_w, p.dilation_w);
  LOOM_CHECK(ho > 0 && wo > 0, "conv2d: input ", x.shape(), " is smaller than the (dilated) kernel ",
             weight.shape(), " with padding ", p.pad_h, "x", p.pad_w);

  const bool has_bias = bias.defined();
  if (has_bias) {
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "conv2d: bias of shape ", bias.shape(),
               " does not match ", weight.size(0), " output channels");
    LOOM_CHECK(bias.device() == x.device() && bias.dtype() == x.dtype(), "conv2d: bias is ", bias.dtype(), " on ",
               bias.device(), " but the input is ", x.dtype(), " on ", x.device());
  }

  Tensor xc = contiguous_raw(x), wc = contiguous_raw(weight);
  Tensor bc = has_bias ? contiguous_raw(bias) : Tensor();
  Tensor y = empty({x.size(0), weight.size(0), ho, wo}, x.options());
  // Each of the forward, dx and dw is one product of this many FLOPs (tensor/flop_counter.h).
  const int64_t flops = flops::conv2d(y.size(0), y.size(1), ho, wo, weight.size(1), weight.size(2), weight.size(3));
  if (y.numel() > 0) {
    backend_for(x.device()).conv2d(xc, wc, bc, p, y);
    count_flops("convolution", flops);
  }
  TensorList inputs{x, weight};
  if (has_bias) inputs.push_back(bias);
  if (autograd::needs_grad(inputs)) {
    const bool dx_needed = x.requires_grad(), dw_needed = weight.requires_grad();
    const bool db_needed = has_bias && bias.requires_grad();
    // With a fused ReLU, the backward passes mask dy by its output.
    autograd::SavedTensor relu_out = p.relu ? autograd::SavedTensor(y) : autograd::SavedTensor();
    // Selective: dx and (dw, db) are separate kernels, so a split backward
    // (autograd/split_backward.h) can ask for dx now and the rest later.
    autograd::record_selective(
        p.relu ? "Conv2dReluBackward" : "Conv2dBackward", inputs, {y},
        [sx = autograd::SavedTensor(xc), sw = autograd::SavedTensor(wc), relu_out, p, dx_needed, dw_needed,
         db_needed, has_bias, flops](const TensorList& g, const autograd::InputMask& wanted) {
          Tensor dy = contiguous_raw(g[0]);
          Tensor y = p.relu ? relu_out.get() : Tensor();
          const bool dx_wanted = dx_needed && autograd::wants(wanted, 0);
          const bool dw_wanted = dw_needed && autograd::wants(wanted, 1);
          const bool db_wanted = db_needed && autograd::wants(wanted, 2);
          Tensor dx, dw, db;
          if (dx_wanted) {
            dx = empty(sx.get().shape(), sx.get().options());
            backend_for(dy.device()).conv2d_backward_input(dy, y, sw.get(), p, dx);
            count_flops("convolution_backward", flops);
          }
          if (db_wanted) db = empty({sw.get().size(0)}, sw.get().options());
          if (dw_wanted || db_wanted) {
            // The weight's gradient comes with the bias's at little extra cost.
            dw = empty(sw.get().shape(), sw.get().options());
            backend_for(dy.device()).conv2d_backward_weight(dy, y, sx.get(), p, dw, db);
            count_flops("convolution_backward", flops);
          }
          TensorList grads{dx, dw_wanted ? dw : Tensor()};
          if (has_bias) grads.push_back(db);
          return grads;
        });
  }
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dParams p) {
  p.relu = false;
  return convolve(x, weight, bias, p);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Conv2dParams p) {
  p.relu = true;
  return convolve(x, weight, bias, p);
}

}  // namespace loom::nn::functional
