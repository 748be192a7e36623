// float8_linear: a Linear layer's three products in float8 (torchao's
// Float8Linear with tensorwise dynamic scaling), forward and backward here.
//
//   forward      y  = x W^T + b     x8 (e4m3) @ W8 (e4m3)^T
//   grad_input   dx = dy W          dy8 (e5m2) @ (W8^T)^T
//   grad_weight  dW = dy^T x        dy8^T (e5m2) @ (x8^T)^T
//
// Each product takes both operands with K along their rows (tensor/float8.h),
// so the forward's casts also write the transposes that the backward reads:
// x8^T and W8^T are what the node saves (one byte an element, where the
// usual Linear saves x in its own dtype), and dy is cast once for both of
// its products. Activations and weights are e4m3 (more precision), the
// gradient e5m2 (more range), as torchao's recipe.
//
// x is cast from whatever dtype it arrives in: under autocast, a layer norm
// hands float32 to the projection after it, and casting that straight to
// float8 rounds once where torchao first rounds it to bfloat16 and then to
// float8. The weight is cast from its float32 master copy every step.
#include "autograd/node.h"
#include "nn/functional.h"
#include "tensor/autocast.h"
#include "tensor/float8.h"

namespace loom::nn::functional {
namespace {

// The dtype a product can write a gradient of `dtype` in: float64 has no
// float8 product output, so it is computed in float32 and converted.
DType product_dtype(DType dtype) { return dtype == kFloat64 ? kFloat32 : dtype; }

// The float8 product a @ b^T written as `dtype`.
Tensor product_in(const Float8Matrix& a, const Float8Matrix& b, DType dtype) {
  return float8_scaled_mm(a, b, Tensor(), product_dtype(dtype)).to(dtype);
}

}  // namespace

Tensor float8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  LOOM_CHECK(x.defined() && weight.defined(), "float8_linear: got an undefined tensor");
  LOOM_CHECK(weight.dim() == 2, "float8_linear: weight must be 2-D (out, in), got shape ", weight.shape());
  const int64_t in = weight.size(1), out = weight.size(0);
  LOOM_CHECK(x.dim() >= 1 && x.size(-1) == in, "float8_linear: input of shape ", x.shape(),
             " does not end in the weight's in_features ", in);
  LOOM_CHECK(x.device() == weight.device() && (!bias.defined() || bias.device() == weight.device()),
             "float8_linear: x is on ", x.device(), ", the weight on ", weight.device(),
             bias.defined() ? ", the bias on " : "", bias.defined() ? bias.device().str() : "",
             ": they must share one device");
  LOOM_CHECK(is_floating(x.dtype()) && is_floating(weight.dtype()), "float8_linear: expected floating x and weight, ",
             "got ", x.dtype(), " and ", weight.dtype());
  const int64_t rows = x.numel() / in;
  LOOM_CHECK(float8_fits(rows) && float8_fits(in) && float8_fits(out), "float8_linear: the rows of x (", rows,
             " of them, its leading dims together), in_features ", in, " and out_features ", out,
             " must all be multiples of 16 (the tensor cores' float8 products read 16-byte aligned rows)");
  // The output's dtype, as linear's under autocast; without it, x's.
  const DType out_dtype = autocast_dtype().value_or(x.dtype());
  LOOM_CHECK(out_dtype != kFloat64, "float8_linear: a float64 x has no float8 product (float32, bfloat16 or ",
             "float16 outputs only); run it under autocast or in float32");
  std::vector<int64_t> shape = x.shape().vec();
  shape.back() = out;
  const Tensor x_rows = x.reshape({rows, in});
  const Tensor b = bias.defined() ? bias.to(out_dtype) : Tensor();  // a recorded cast: its gradient reaches bias
  const bool needs_dx = autograd::needs_grad(x_rows), needs_dw = autograd::needs_grad(weight);
  const Float8Cast x8 = float8_cast(x_rows, Float8Format::kE4M3, /*transposed=*/needs_dw);
  const Float8Cast w8 = float8_cast(weight, Float8Format::kE4M3, /*transposed=*/needs_dx);
  Tensor y = float8_scaled_mm(x8.matrix, w8.matrix, b, out_dtype);  // (rows, out)
  if (autograd::needs_grad({x_rows, weight, b}))
    autograd::record("Float8LinearBackward", {x_rows, weight, b}, y,
                     [x_t = x8.transposed, w_t = w8.transposed, x_dtype = x_rows.dtype(), w_dtype = weight.dtype(),
                      needs_dx, needs_dw, needs_db = autograd::needs_grad(b)](const TensorList& g) {
                       const Tensor& dy = g[0];  // (rows, out)
                       const Float8Cast dy8 = float8_cast(dy, Float8Format::kE5M2, /*transposed=*/needs_dw);
                       return TensorList{needs_dx ? product_in(dy8.matrix, w_t, x_dtype) : Tensor(),
                                         needs_dw ? product_in(dy8.transposed, x_t, w_dtype) : Tensor(),
                                         needs_db ? dy.sum({0}) : Tensor()};
                     });
  return y.reshape(shape);
}

}  // namespace loom::nn::functional
