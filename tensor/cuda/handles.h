// cuBLAS, cuBLASLt and cuDNN handles for the calling thread, the cuBLAS and
// cuDNN ones bound to the current stream (cuBLASLt takes a stream per call).
//
// A handle must not be used by two threads at once, and making one is slow
// (cudnnCreate takes a good part of a second). So each thread gets its own
// handle per device the first time it needs one, from a pool that takes the
// handle back when the thread ends; a later thread reuses it. Every call binds
// the handle to the device's current stream, so library work is ordered with
// loom's kernels.
//
//   cublasHandle_t h = cuda::cublas_handle(device);   // inside a DeviceGuard for `device`
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

namespace loom::cuda {

cublasHandle_t cublas_handle(int device);
cublasLtHandle_t cublaslt_handle(int device);
cudnnHandle_t cudnn_handle(int device);

}  // namespace loom::cuda
