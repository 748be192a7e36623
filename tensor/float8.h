// float8 matrices and their product (PyTorch's torch._scaled_mm with
// tensorwise scales, torchao's float8 casts), for float8 training
// (nn::functional::float8_linear).
//
// A matrix is cast to float8 with a scale of its own: the codes of x * scale
// (float8_rounding.h), scale = largest / amax(|x|), so its largest magnitude
// uses the whole range. The amax, the scale and its inverse stay on the
// device: nothing is read back to the host, so a training step that casts
// never waits for the GPU (tensor/host_waits.h).
//
//   Float8Cast x8 = float8_cast(x, Float8Format::kE4M3, /*transposed=*/true);   // x (M, K)
//   Float8Cast w8 = float8_cast(w, Float8Format::kE4M3, /*transposed=*/false);  // w (N, K)
//   Tensor y = float8_scaled_mm(x8.matrix, w8.matrix, bias, kBFloat16);         // x w^T + bias: (M, N)
//
// The product takes both operands with K along their rows, as cuBLASLt's FP8
// kernels on Hopper do (the "TN" layout), so the gradients' products read
// the transposed copies that float8_cast writes beside the codes.
// On the GPU the product runs on the tensor cores (cuBLASLt); on the CPU it
// is simulated: the same codes, decoded exactly, multiplied in float32.
#pragma once

#include "tensor/float8_rounding.h"
#include "tensor/tensor.h"

namespace loom {

// A matrix in float8: element (i, j) stands for decode(bits[i][j]) * inv_scale.
struct Float8Matrix {
  Tensor bits;       // (rows, cols) uint8, contiguous: the codes of x * scale
  Tensor inv_scale;  // () float32 on bits' device: 1 / scale
  Float8Format format = Float8Format::kE4M3;
};

// A cast of x (rows, cols): its codes, and the same codes transposed,
// (cols, rows), when asked for (else transposed.bits is undefined). Both
// share one scale.
struct Float8Cast {
  Float8Matrix matrix;
  Float8Matrix transposed;
};

// x (rows, cols), floating, any layout, not empty. One pass over x finds
// amax(|x|), a second computes the scale from it and writes the codes, both
// on x's device. No autograd (the codes are not differentiable;
// float8_linear records the gradient of the whole product).
Float8Cast float8_cast(const Tensor& x, Float8Format format, bool transposed);

// out (M, N) = a (M, K) @ b (N, K)^T, with a's and b's scales undone, plus
// bias (N) if defined; accumulated in float32, rounded once to out_dtype
// (float32, bfloat16 or float16; a bias must be of out_dtype). M, N and K
// must be multiples of 16 (cuBLASLt's FP8 kernels need 16-byte aligned rows;
// the CPU refuses the same shapes, so that a program does the same on both),
// and a and b must not both be e5m2 (there is no such kernel).
Tensor float8_scaled_mm(const Float8Matrix& a, const Float8Matrix& b, const Tensor& bias, DType out_dtype);

// The values m stands for, in float32 (decode(bits) * inv_scale), on m's
// device: for references and tests.
Tensor float8_dequantize(const Float8Matrix& m);

// Whether float8_scaled_mm takes a dimension of this size.
inline bool float8_fits(int64_t size) { return size > 0 && size % 16 == 0; }

}  // namespace loom
