// The pieces of a CUDA matrix product that matmul.cc (cublasGemmEx) and
// matmul_lt.cc (cublasLtMatmul with a bias epilogue) share: how loom's
// row-major matrices reach the column-major libraries, and which types.
//
// loom's out (M, N) row-major is, to cuBLAS, the (N, M) matrix C = B^T A^T;
// a row-major operand's memory is its transpose read column-major, and a
// transposed view (x.t(), stride 1 along its rows) is the matrix itself,
// which cuBLAS transposes with a flag. So transposed operands and broadcast
// batches (batch stride 0) cost no copy; only an operand with no unit stride
// (a slice with a step) is copied first.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "tensor/cuda/launch.h"
#include "tensor/tensor.h"

namespace loom::cuda {

// cuBLAS's recommended workspace on Hopper; taken from the caching allocator
// on the current stream for each call, so streams never share one.
inline constexpr int64_t kGemmWorkspaceBytes = 32 << 20;

// How a (rows x cols) slice of a (batch, rows, cols) tensor reaches cuBLAS.
struct GemmOperand {
  bool usable = false;
  bool row_major = true;  // true: cuBLAS sees the transpose (op N gives it back)
  int64_t ld = 0;         // cuBLAS's leading dimension

  cublasOperation_t op() const { return row_major ? CUBLAS_OP_N : CUBLAS_OP_T; }
};

// The operand `t` (batch, rows, cols) as cuBLAS can take it: t itself, or a
// contiguous copy; `layout` says how cuBLAS reads it.
Tensor gemm_ready(const Tensor& t, GemmOperand& layout);

// cuBLAS's name for a floating dtype; an error for others.
cudaDataType_t gemm_type(DType dtype);

// The compute type for a product of `dtype`: FP64 for float64, FP32
// otherwise (TF32 for float32 when allow_tf32()).
cublasComputeType_t gemm_compute_type(DType dtype);

// out (1, M, N) = a @ b + bias (N), in one cublasLtMatmul call that adds the
// bias in its epilogue (matmul_lt.cc); a and b as gemm_ready() gave them.
// Returns false, having queued nothing, where cuBLASLt has no algorithm for
// the case (float64 is never tried): the caller then multiplies and adds.
bool matmul_with_bias_epilogue(const LaunchContext& ctx, const Tensor& a, const GemmOperand& la, const Tensor& b,
                               const GemmOperand& lb, const Tensor& bias, const Tensor& out);

}  // namespace loom::cuda
