// CUDA_CHECK, CUBLAS_CHECK, CUDNN_CHECK: call a CUDA library function and throw
// loom::Error with file:line, the call, and the library's own message when it
// fails (docs/style.md, "Errors"). Library code never aborts on a CUDA error.
//
//   CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
//   CUBLAS_CHECK(cublasSetStream(handle, stream));
//
// LOOM_CUDA_LAUNCH_CHECK(stream) follows every kernel launch: it turns a bad
// launch (too many threads, too much shared memory) into an error at the
// launch site in every build mode, and in debug builds (no NDEBUG, i.e.
// `-c dbg`) it also waits for the kernel, so that a fault inside it is
// reported at its launch rather than at some later call.
#pragma once

#include <cuda_runtime_api.h>

namespace loom::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(int status, const char* call, const char* file, int line);

}  // namespace loom::cuda::detail

#define CUDA_CHECK(call)                                                           \
  do {                                                                             \
    cudaError_t loom_cuda_status_ = (call);                                        \
    if (loom_cuda_status_ != cudaSuccess)                                          \
      ::loom::cuda::detail::throw_cuda_error(loom_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)

// Both libraries use 0 for success.
#define CUBLAS_CHECK(call)                                                         \
  do {                                                                             \
    int loom_cublas_status_ = static_cast<int>(call);                              \
    if (loom_cublas_status_ != 0)                                                  \
      ::loom::cuda::detail::throw_cublas_error(loom_cublas_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(call)                                                          \
  do {                                                                             \
    int loom_cudnn_status_ = static_cast<int>(call);                               \
    if (loom_cudnn_status_ != 0)                                                   \
      ::loom::cuda::detail::throw_cudnn_error(loom_cudnn_status_, #call, __FILE__, __LINE__); \
  } while (0)

#ifdef NDEBUG
#define LOOM_CUDA_LAUNCH_CHECK(stream) CUDA_CHECK(cudaGetLastError())
#else
// (Not while the stream is captured into a graph: waiting is illegal there.)
#define LOOM_CUDA_LAUNCH_CHECK(stream)                                         \
  do {                                                                         \
    CUDA_CHECK(cudaGetLastError());                                            \
    cudaStreamCaptureStatus loom_capture_ = cudaStreamCaptureStatusNone;       \
    CUDA_CHECK(cudaStreamIsCapturing(stream, &loom_capture_));                 \
    if (loom_capture_ == cudaStreamCaptureStatusNone)                          \
      CUDA_CHECK(cudaStreamSynchronize(stream));                               \
  } while (0)
#endif
