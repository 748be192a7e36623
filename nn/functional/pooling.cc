// Pooling ops: max (saving argmax positions), average, adaptive average.
#include "autograd/node.h"
#include "nn/functional.h"

namespace loom::nn::functional {
namespace {

Tensor contiguous_raw(const Tensor& t) { return t.is_contiguous() ? t : contiguous_copy(t); }

Shape pooled_shape(const char* op, const Tensor& x, const Pool2dParams& p) {
  LOOM_CHECK(x.dim() == 4, op, ": expected a 4-D input (N, C, H, W), got shape ", x.shape());
  LOOM_CHECK(is_floating(x.dtype()), op, ": expected a floating-point input, got ", x.dtype());
  LOOM_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1 && p.stride_h >= 1 && p.stride_w >= 1, op,
             ": kernel and stride must be positive");
  LOOM_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w, op,
             ": padding must be non-negative and at most half the kernel (got ", p.pad_h, "x", p.pad_w,
             " for kernel ", p.kernel_h, "x", p.kernel_w, ")");
  const int64_t ho = window_output_size(x.size(2), p.kernel_h, p.stride_h, p.pad_h, 1);
  const int64_t wo = window_output_size(x.size(3), p.kernel_w, p.stride_w, p.pad_w, 1);
  LOOM_CHECK(ho > 0 && wo > 0, op, ": input ", x.shape(), " is smaller than the ", p.kernel_h, "x", p.kernel_w,
             " window");
  return {x.size(0), x.size(1), ho, wo};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p) {
  Shape shape = pooled_shape("max_pool2d", x, p);
  Tensor y = empty(shape, x.options());
  Tensor indices = empty(shape, {.dtype = kInt64, .device = x.device()});
  if (y.numel() > 0) backend_for(x.device()).max_pool2d(contiguous_raw(x), p, y, indices);
  if (autograd::needs_grad(x))
    autograd::record("MaxPool2dBackward", {x}, y,
                     [indices, input = x.shape(), options = x.options()](const TensorList& g) {
                       Tensor dx = empty(input, options);
                       backend_for(dx.device()).max_pool2d_backward(contiguous_raw(g[0]), indices, dx);
                       return TensorList{dx};
                     });
  return y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  Shape shape = pooled_shape("avg_pool2d", x, p);
  Tensor y = empty(shape, x.options());
  if (y.numel() > 0) backend_for(x.device()).avg_pool2d(contiguous_raw(x), p, y);
  if (autograd::needs_grad(x))
    autograd::record("AvgPool2dBackward", {x}, y, [p, input = x.shape(), options = x.options()](const TensorList& g) {
      Tensor dx = empty(input, options);
      backend_for(dx.device()).avg_pool2d_backward(contiguous_raw(g[0]), p, dx);
      return TensorList{dx};
    });
  return y;
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  LOOM_CHECK(x.dim() == 4, "adaptive_avg_pool2d: expected a 4-D input (N, C, H, W), got shape ", x.shape());
  LOOM_CHECK(is_floating(x.dtype()), "adaptive_avg_pool2d: expected a floating-point input, got ", x.dtype());
  LOOM_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output size must be positive, got ", out_h, "x", out_w);
  LOOM_CHECK(x.size(2) > 0 && x.size(3) > 0, "adaptive_avg_pool2d: empty input plane ", x.shape());
  Tensor y = empty({x.size(0), x.size(1), out_h, out_w}, x.options());
  if (y.numel() > 0) backend_for(x.device()).adaptive_avg_pool2d(contiguous_raw(x), y);
  if (autograd::needs_grad(x))
    autograd::record("AdaptiveAvgPool2dBackward", {x}, y, [input = x.shape(), options = x.options()](const TensorList& g) {
      Tensor dx = empty(input, options);
      backend_for(dx.device()).adaptive_avg_pool2d_backward(contiguous_raw(g[0]), dx);
      return TensorList{dx};
    });
  return y;
}

}  // namespace loom::nn::functional
