// The float8 product (tensor/backend.h float8_matmul) on Hopper's tensor
// cores, through cuBLASLt.
//
// loom's out (M, N) = a (M, K) b (N, K)^T is, column-major, the (N x M)
// matrix D = b a^T. Both operands hold K along their rows: read
// column-major, b's memory is the (K x N) matrix b^T, and a's is (K x M)
// a^T. So cuBLASLt's A is loom's b with op T (giving b, N x K) and its B is
// loom's a with op N (a^T, K x M): the "TN" layout, the only one its FP8
// kernels take on Hopper. The other requirements of FP8 (cuBLAS 13 docs,
// cublasLtMatmul): compute type CUBLAS_COMPUTE_32F with float32 scales;
// 16-byte aligned pointers and leading dimensions (M, N and K multiples of
// 16, which the op checks); A and B not both e5m2; for a bfloat16 or
// float16 D, C of D's type and a bias of D's type (float32 D: no epilogue
// bias here, the op adds it).
//
// The scales are device pointers (CUBLASLT_MATMUL_DESC_A/B_SCALE_POINTER):
// D = scale_A scale_B (A B) + bias, with the inverse scales of the casts,
// read by the kernel where the cast kernel wrote them, never by the host.
// Fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM) stays off: the
// partial sums are promoted to full float32 as cuBLASLt goes along K.
#include <cublasLt.h>

#include <cstdint>

#include "tensor/creation.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/gemm.h"
#include "tensor/cuda/handles.h"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/lt_descriptors.h"

namespace loom::cuda {
namespace {

cudaDataType_t float8_type(Float8Format format) {
  return format == Float8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

const char* float8_name(Float8Format format) { return format == Float8Format::kE4M3 ? "e4m3" : "e5m2"; }

}  // namespace

void CudaBackend::float8_matmul(const Tensor& a, Float8Format a_format, const Tensor& a_inv_scale, const Tensor& b,
                                Float8Format b_format, const Tensor& b_inv_scale, const Tensor& bias,
                                const Tensor& out) {
  LaunchContext ctx(out);
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  const cudaDataType_t out_type = gemm_type(out.dtype());

  MatmulDesc desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(desc.address(), CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T));  // cuBLAS's A is loom's b
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(CUBLAS_OP_N));  // cuBLAS's B is loom's a
  set(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(b_inv_scale.raw_data()));
  set(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(a_inv_scale.raw_data()));
  if (bias.defined()) {  // a bias of D's rows (N), added to each of its M columns
    set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.raw_data()));
    set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(out_type));
  }

  MatrixLayout layout_a, layout_b, layout_d;  // cuBLAS's A (loom's b), B (loom's a), and C = D
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout_a.address(), float8_type(b_format), k, n, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout_b.address(), float8_type(a_format), k, m, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout_d.address(), out_type, n, m, n));

  Preference preference;
  make_exact_sum_preference(preference, kGemmWorkspaceBytes);

  cublasLtHandle_t handle = cublaslt_handle(ctx.device);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), layout_a.get(), layout_b.get(),
                                                               layout_d.get(), layout_d.get(), preference.get(), 1,
                                                               &best, &found);
  LOOM_CHECK(status == CUBLAS_STATUS_SUCCESS && found > 0, "float8_scaled_mm: cuBLASLt has no FP8 kernel for ",
             float8_name(a_format), " (", m, " x ", k, ") @ ", float8_name(b_format), " (", n, " x ", k, ")^T -> ",
             out.dtype(), bias.defined() ? " with a bias" : "", " on cuda:", ctx.device, " (",
             cublasGetStatusString(status), ", ", found, " algorithms; FP8 needs compute capability 8.9 or 9.0+)");

  const float alpha = 1, beta = 0;
  Tensor workspace = empty({kGemmWorkspaceBytes}, {.dtype = kUInt8, .device = out.device()});
  CUBLAS_CHECK(cublasLtMatmul(handle, desc.get(), &alpha, b.raw_data(), layout_a.get(), a.raw_data(), layout_b.get(),
                              &beta, out.raw_data(), layout_d.get(), out.raw_data(), layout_d.get(), &best.algo,
                              workspace.raw_data(), kGemmWorkspaceBytes, ctx.stream));
}

}  // namespace loom::cuda
