// CUDA batched matmul through cuBLAS (one strided-batched GEMM per call);
// gemm.h says how loom's row-major operands reach it without copies.
//
// float32 is exact FP32 (CUBLAS_COMPUTE_32F) unless set_allow_tf32(true)
// (CUBLAS_COMPUTE_32F_FAST_TF32); float64 uses FP64 (cuBLAS's Dgemm path);
// bfloat16 and float16 multiply on the tensor cores, accumulate in FP32
// (CUBLAS_COMPUTE_32F) and round the result once, as the CPU does (the
// handle disallows 16-bit split-K reductions: handles.cc).
//
// A bias row goes through cuBLASLt's epilogue when that library is preferred
// (tensor/blas_library.h, matmul_lt.cc); otherwise a broadcast add follows
// the product.
#include <cublas_v2.h>

#include <algorithm>
#include <cstdint>

#include "tensor/blas_library.h"
#include "tensor/creation.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/gemm.h"
#include "tensor/cuda/handles.h"
#include "tensor/cuda/launch.h"
#include "tensor/precision.h"

namespace loom::cuda {
namespace {

GemmOperand describe(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  // Strides of size-1 dims mean nothing; cuBLAS wants ld >= its row count.
  if (cols == 1 || col_stride == 1) {
    const int64_t ld = rows == 1 ? std::max<int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<int64_t>(cols, 1)) return {true, true, ld};
  }
  if (rows == 1 || row_stride == 1) {
    const int64_t ld = cols == 1 ? std::max<int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<int64_t>(rows, 1)) return {true, false, ld};
  }
  return {};
}

bool fits_int(int64_t v) { return v >= 0 && v <= INT32_MAX; }

// The bias (N) as an (B, M, N) operand of an elementwise add: stride 0 but along N.
Tensor as_rows(const Tensor& bias, const Shape& shape) {
  return as_strided(bias, shape, Strides{0, 0, bias.stride(0)}, bias.storage_offset());
}

}  // namespace

Tensor gemm_ready(const Tensor& t, GemmOperand& layout) {
  const int64_t rows = t.size(1), cols = t.size(2);
  layout = describe(rows, cols, t.stride(1), t.stride(2));
  if (layout.usable) return t;
  Tensor copy = contiguous_copy(t);
  layout = describe(rows, cols, copy.stride(1), copy.stride(2));
  LOOM_INTERNAL_ASSERT(layout.usable);
  return copy;
}

cudaDataType_t gemm_type(DType dtype) {
  switch (dtype) {
    case kFloat32: return CUDA_R_32F;
    case kFloat64: return CUDA_R_64F;
    case kBFloat16: return CUDA_R_16BF;
    case kFloat16: return CUDA_R_16F;
    default: LOOM_FAIL("matmul: CUDA multiplies floating-point tensors, got ", dtype);
  }
}

cublasComputeType_t gemm_compute_type(DType dtype) {
  if (dtype == kFloat64) return CUBLAS_COMPUTE_64F;
  return dtype == kFloat32 && allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

void CudaBackend::matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias, const Tensor& out) {
  LaunchContext ctx(out);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a_in.size(2);
  if (out.numel() == 0) return;
  GemmOperand la, lb;
  const Tensor a = gemm_ready(a_in, la);
  const Tensor b = gemm_ready(b_in, lb);
  LOOM_CHECK(fits_int(m) && fits_int(n) && fits_int(k) && fits_int(batch) && fits_int(la.ld) && fits_int(lb.ld),
             "matmul: sizes (", batch, " x ", m, " x ", k, " @ ", k, " x ", n,
             ") exceed what one cuBLAS call takes (2^31 - 1 per dim)");
  if (bias.defined() && batch == 1 && preferred_blas_library() == BlasLibrary::kCublasLt &&
      matmul_with_bias_epilogue(ctx, a, la, b, lb, bias, out))
    return;

  const bool is_double = out.dtype() == kFloat64;
  const cudaDataType_t type = gemm_type(out.dtype());
  const cublasComputeType_t compute = gemm_compute_type(out.dtype());
  const float alpha_f = 1, beta_f = 0;
  const double alpha_d = 1, beta_d = 0;
  const void* alpha = is_double ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = is_double ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);

  cublasHandle_t handle = cublas_handle(ctx.device);
  Tensor workspace = empty({kGemmWorkspaceBytes}, {.dtype = kUInt8, .device = out.device()});
  CUBLAS_CHECK(cublasSetWorkspace(handle, workspace.raw_data(), kGemmWorkspaceBytes));

  // C (n x m, column-major) = op(B) (n x k) * op(A) (k x m).
  if (batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(handle, lb.op(), la.op(), static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                              alpha, b.raw_data(), type, static_cast<int>(lb.ld), a.raw_data(), type,
                              static_cast<int>(la.ld), beta, out.raw_data(), type, static_cast<int>(n), compute,
                              CUBLAS_GEMM_DEFAULT));
  } else {
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        handle, lb.op(), la.op(), static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), alpha, b.raw_data(),
        type, static_cast<int>(lb.ld), static_cast<long long>(b.stride(0)), a.raw_data(), type,
        static_cast<int>(la.ld), static_cast<long long>(a.stride(0)), beta, out.raw_data(), type,
        static_cast<int>(n), static_cast<long long>(m * n), static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT));
  }
  // The workspace goes back to the cache for later work on this stream only.
  if (bias.defined()) binary(BinaryOp::Add, out, as_rows(bias, out.shape()), out, 1);
}

}  // namespace loom::cuda
