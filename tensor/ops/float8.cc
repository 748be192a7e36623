// float8 casts and the scaled product (tensor/float8.h): the checks, then
// one backend call each. The amax is a composite (abs, then amax) on x's
// device; a fused amax kernel would save one pass over x.
#include "tensor/float8.h"

#include <cstdint>
#include <vector>

#include "tensor/flop_counter.h"
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

void check_matrix(const char* op, const char* which, const Float8Matrix& m) {
  LOOM_CHECK(m.bits.defined() && m.inv_scale.defined(), op, ": ", which, " has no codes or no scale");
  LOOM_CHECK(m.bits.dtype() == kUInt8 && m.bits.dim() == 2 && m.bits.is_contiguous(), op, ": ", which,
             " must be contiguous (rows, cols) uint8 codes, got ", m.bits.dtype(), " of shape ", m.bits.shape());
  LOOM_CHECK(m.inv_scale.dtype() == kFloat32 && m.inv_scale.numel() == 1, op, ": ", which,
             "'s inverse scale must be one float32 value, got ", m.inv_scale.dtype(), " of shape ",
             m.inv_scale.shape());
  detail::check_same_device(op, m.bits, m.inv_scale);
  LOOM_CHECK(reinterpret_cast<uintptr_t>(m.bits.raw_data()) % 16 == 0, op, ": ", which,
             "'s codes must start at a 16-byte aligned address (float8_cast's do; a view into them may not)");
}

}  // namespace

Float8Cast float8_cast(const Tensor& x, Float8Format format, bool transposed) {
  detail::check_defined("float8_cast", x);
  LOOM_CHECK(x.dim() == 2, "float8_cast: expected a matrix (rows, cols), got shape ", x.shape());
  detail::check_floating("float8_cast", x);
  LOOM_CHECK(x.numel() > 0, "float8_cast: the matrix of shape ", x.shape(), " is empty (it has no amax)");
  NoGradGuard no_grad;
  const Tensor src = x.contiguous();
  // Exact in any dtype: the largest |x| is one of x's values.
  const Tensor amax = loom::amax(src.abs()).to(kFloat32);
  const int64_t rows = x.size(0), cols = x.size(1);
  const TensorOptions bytes{.dtype = kUInt8, .device = x.device()};
  Float8Cast cast;
  cast.matrix = {empty({rows, cols}, bytes), empty({}, {.dtype = kFloat32, .device = x.device()}), format};
  cast.transposed = {transposed ? empty({cols, rows}, bytes) : Tensor(), cast.matrix.inv_scale, format};
  backend_for(x.device())
      .float8_cast(src, amax, format, cast.matrix.bits, cast.transposed.bits, cast.matrix.inv_scale);
  return cast;
}

Tensor float8_scaled_mm(const Float8Matrix& a, const Float8Matrix& b, const Tensor& bias, DType out_dtype) {
  const char* op = "float8_scaled_mm";
  check_matrix(op, "a", a);
  check_matrix(op, "b", b);
  detail::check_same_device(op, a.bits, b.bits);
  const int64_t m = a.bits.size(0), n = b.bits.size(0), k = a.bits.size(1);
  LOOM_CHECK(b.bits.size(1) == k, op, ": a ", a.bits.shape(), " @ b ", b.bits.shape(),
             "^T: the operands' rows must both be K long (", k, " != ", b.bits.size(1), ")");
  LOOM_CHECK(float8_fits(m) && float8_fits(n) && float8_fits(k), op, ": M, N and K must be positive multiples of ",
             "16 (the tensor cores' FP8 kernels read 16-byte aligned rows), got M ", m, ", N ", n, ", K ", k);
  LOOM_CHECK(a.format == Float8Format::kE4M3 || b.format == Float8Format::kE4M3, op,
             ": both operands are e5m2; cuBLASLt multiplies e4m3 by e4m3 or by e5m2, not e5m2 by e5m2");
  LOOM_CHECK(out_dtype == kFloat32 || is_16bit_floating(out_dtype), op,
             ": the output must be float32, bfloat16 or float16, got ", out_dtype);
  if (bias.defined()) {
    detail::check_same_device(op, a.bits, bias);
    LOOM_CHECK(bias.dim() == 1 && bias.size(0) == n, op, ": the bias must be (N) = (", n, "), got shape ",
               bias.shape());
    LOOM_CHECK(bias.dtype() == out_dtype, op, ": the bias must be of the output's dtype ", out_dtype, ", got ",
               bias.dtype());
  }
  NoGradGuard no_grad;
  Tensor out = empty({m, n}, {.dtype = out_dtype, .device = a.bits.device()});
  // cuBLASLt's epilogue adds a 16-bit output's bias in float32 before the one
  // rounding; it takes a float32 output's bias only in bfloat16, so that one
  // is added after the product, in float32.
  const bool bias_in_product = bias.defined() && out_dtype != kFloat32;
  Tensor row;
  if (bias_in_product) {
    row = bias.contiguous();
    // cuBLASLt chooses kernels by their pointers' alignment: a fresh copy is 16-byte aligned.
    if (reinterpret_cast<uintptr_t>(row.raw_data()) % 16 != 0) row = row.clone();
  }
  backend_for(out.device()).float8_matmul(a.bits, a.format, a.inv_scale, b.bits, b.format, b.inv_scale, row, out);
  count_flops("_scaled_mm", flops::mm(m, k, n));  // PyTorch's name for the scaled float8 product
  if (bias.defined() && !bias_in_product) out.add_(bias);
  return out;
}

Tensor float8_dequantize(const Float8Matrix& m) {
  check_matrix("float8_dequantize", "the matrix", m);
  NoGradGuard no_grad;
  // Every code's value, then a lookup: works on any device.
  std::vector<float> values(256);
  for (int code = 0; code < 256; ++code) values[code] = float8::decode(static_cast<uint8_t>(code), m.format);
  const Tensor table = from_vector(values, {256}).to(m.bits.device());
  const Tensor decoded = index_select(table, 0, m.bits.reshape({-1}).to(kInt64)).reshape(m.bits.shape().vec());
  return decoded * m.inv_scale;
}

}  // namespace loom
