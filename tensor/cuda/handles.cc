#include "tensor/cuda/handles.h"

#include <mutex>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace loom::cuda {
namespace {

// Handles that no thread holds, per device. Never destroyed: destroying
// handles at exit races with the CUDA runtime's own teardown.
template <typename Handle>
struct Pool {
  std::mutex mutex;
  std::vector<std::vector<Handle>> free;

  bool take(int device, Handle* handle) {
    std::lock_guard<std::mutex> lock(mutex);
    if (static_cast<int>(free.size()) <= device || free[device].empty()) return false;
    *handle = free[device].back();
    free[device].pop_back();
    return true;
  }

  void give_back(int device, Handle handle) {
    std::lock_guard<std::mutex> lock(mutex);
    if (static_cast<int>(free.size()) <= device) free.resize(device + 1);
    free[device].push_back(handle);
  }
};

Pool<cublasHandle_t>& cublas_pool() {
  static auto* pool = new Pool<cublasHandle_t>();
  return *pool;
}

Pool<cublasLtHandle_t>& cublaslt_pool() {
  static auto* pool = new Pool<cublasLtHandle_t>();
  return *pool;
}

Pool<cudnnHandle_t>& cudnn_pool() {
  static auto* pool = new Pool<cudnnHandle_t>();
  return *pool;
}

// The calling thread's handles; returned to the pools when the thread ends.
struct ThreadHandles {
  std::vector<cublasHandle_t> cublas;
  std::vector<cublasLtHandle_t> cublaslt;
  std::vector<cudnnHandle_t> cudnn;

  ~ThreadHandles() {
    give_all_back(cublas, cublas_pool());
    give_all_back(cublaslt, cublaslt_pool());
    give_all_back(cudnn, cudnn_pool());
  }

  template <typename Handle>
  static void give_all_back(const std::vector<Handle>& mine, Pool<Handle>& pool) {
    for (size_t d = 0; d < mine.size(); ++d)
      if (mine[d] != nullptr) pool.give_back(static_cast<int>(d), mine[d]);
  }
};

thread_local ThreadHandles thread_handles;

// The calling thread's handle for `device` in `mine`: the first time, one
// from `pool`, or a new one from `create` (with `device` current).
template <typename Handle, typename Create>
Handle thread_handle(int device, std::vector<Handle>& mine, Pool<Handle>& pool, const Create& create) {
  check_device(device);
  if (static_cast<int>(mine.size()) <= device) mine.resize(device_count(), nullptr);
  if (mine[device] == nullptr) {
    Handle handle = nullptr;
    if (!pool.take(device, &handle)) {
      DeviceGuard guard(device);
      // Creating one allocates device memory, which a CUDA graph capture
      // cannot hold (cuDNN reports only "device allocation failed").
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      CUDA_CHECK(cudaStreamIsCapturing(current_stream(device).handle(), &capturing));
      LOOM_CHECK(capturing == cudaStreamCaptureStatusNone, "this thread's first cuBLAS or cuDNN call on cuda:",
                 device, " is inside a CUDA graph capture, which cannot create its library handle; take one step "
                 "outside the capture first (a warm-up)");
      handle = create();
    }
    mine[device] = handle;
  }
  return mine[device];
}

}  // namespace

cublasHandle_t cublas_handle(int device) {
  cublasHandle_t handle = thread_handle(device, thread_handles.cublas, cublas_pool(), [] {
    cublasHandle_t made = nullptr;
    CUBLAS_CHECK(cublasCreate(&made));
    // 16-bit outputs: split-K partial sums add in the FP32 compute type,
    // not in bf16/fp16, so a product rounds once, as on the CPU (PyTorch
    // allows the 16-bit reduction by default; loom prefers the exact sum).
    CUBLAS_CHECK(cublasSetMathMode(
        made, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    return made;
  });
  CUBLAS_CHECK(cublasSetStream(handle, current_stream(device).handle()));
  return handle;
}

cublasLtHandle_t cublaslt_handle(int device) {
  return thread_handle(device, thread_handles.cublaslt, cublaslt_pool(), [] {
    cublasLtHandle_t made = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&made));
    return made;
  });
}

cudnnHandle_t cudnn_handle(int device) {
  cudnnHandle_t handle = thread_handle(device, thread_handles.cudnn, cudnn_pool(), [] {
    cudnnHandle_t made = nullptr;
    CUDNN_CHECK(cudnnCreate(&made));
    return made;
  });
  CUDNN_CHECK(cudnnSetStream(handle, current_stream(device).handle()));
  return handle;
}

}  // namespace loom::cuda
