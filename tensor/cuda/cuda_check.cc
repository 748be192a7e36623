#include "tensor/cuda/cuda_check.h"

#include <cublas_v2.h>
#include <cudnn.h>

#include "tensor/error.h"

namespace loom::cuda::detail {

void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line) {
  // Clears the error if it is not sticky, so that the next call starts clean.
  cudaGetLastError();
  LOOM_FAIL("CUDA error at ", file, ":", line, ": ", call, " failed: ", cudaGetErrorString(code),
            " (", cudaGetErrorName(code), ")");
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  LOOM_FAIL("cuBLAS error at ", file, ":", line, ": ", call, " failed: ",
            cublasGetStatusString(static_cast<cublasStatus_t>(status)), " (status ", status, ")");
}

void throw_cudnn_error(int status, const char* call, const char* file, int line) {
  LOOM_FAIL("cuDNN error at ", file, ":", line, ": ", call, " failed: ",
            cudnnGetErrorString(static_cast<cudnnStatus_t>(status)), " (status ", status, ")");
}

}  // namespace loom::cuda::detail
