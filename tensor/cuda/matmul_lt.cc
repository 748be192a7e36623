// A product plus a bias row in one cuBLASLt call: cublasLtMatmul adds the
// bias in its epilogue while it writes each output tile, where cublasGemmEx
// and a broadcast add would read and write the output once more. This is a
// Linear layer's forward (addmm), as PyTorch runs it.
//
// In cuBLAS's column-major terms (gemm.h) the product is D (N x M) =
// op(B) op(A), and CUBLASLT_EPILOGUE_BIAS adds a vector of D's row count to
// every column: the bias (N), once for each of loom's M rows.
#include <cublasLt.h>

#include <cstdint>

#include "tensor/creation.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/gemm.h"
#include "tensor/cuda/handles.h"
#include "tensor/cuda/lt_descriptors.h"

namespace loom::cuda {
namespace {

// An operand's layout as stored, before its op: op N reads `rows x cols`
// column-major with leading dimension ld, op T that matrix's transpose.
void describe_operand(MatrixLayout& layout, cudaDataType_t type, const GemmOperand& operand, int64_t rows,
                      int64_t cols) {
  const bool as_is = operand.op() == CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout.address(), type, as_is ? rows : cols, as_is ? cols : rows,
                                          operand.ld));
}

}  // namespace

bool matmul_with_bias_epilogue(const LaunchContext& ctx, const Tensor& a, const GemmOperand& la, const Tensor& b,
                               const GemmOperand& lb, const Tensor& bias, const Tensor& out) {
  const DType dtype = out.dtype();
  if (dtype == kFloat64) return false;
  const int64_t m = out.size(1), n = out.size(2), k = a.size(2);
  const cudaDataType_t type = gemm_type(dtype);

  MatmulDesc desc;  // float scale (alpha, beta) for float32, bfloat16 and float16 alike
  CUBLAS_CHECK(cublasLtMatmulDescCreate(desc.address(), gemm_compute_type(dtype), CUDA_R_32F));
  set(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(lb.op()));  // cuBLAS's A is loom's b
  set(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(la.op()));
  set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
  set(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.raw_data());
  set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(type));

  MatrixLayout layout_b, layout_a, layout_d;
  describe_operand(layout_b, type, lb, n, k);  // op(B): N x K
  describe_operand(layout_a, type, la, k, m);  // op(A): K x M
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(layout_d.address(), type, n, m, n));

  Preference preference;
  make_exact_sum_preference(preference, kGemmWorkspaceBytes);

  cublasLtHandle_t handle = cublaslt_handle(ctx.device);
  cublasLtMatmulHeuristicResult_t best{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), layout_b.get(), layout_a.get(),
                                                               layout_d.get(), layout_d.get(), preference.get(), 1,
                                                               &best, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  CUBLAS_CHECK(status);

  const float alpha = 1, beta = 0;
  Tensor workspace = empty({kGemmWorkspaceBytes}, {.dtype = kUInt8, .device = out.device()});
  CUBLAS_CHECK(cublasLtMatmul(handle, desc.get(), &alpha, b.raw_data(), layout_b.get(), a.raw_data(), layout_a.get(),
                              &beta, out.raw_data(), layout_d.get(), out.raw_data(), layout_d.get(), &best.algo,
                              workspace.raw_data(), kGemmWorkspaceBytes, ctx.stream));
  return true;
}

}  // namespace loom::cuda
