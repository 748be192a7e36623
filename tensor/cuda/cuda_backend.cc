#include "tensor/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/index_error.h"
#include "tensor/cuda/pinned_allocator.h"

namespace loom::cuda {

Allocator& CudaBackend::allocator(int device_index) { return device_allocator(device_index); }

int CudaBackend::device_count() { return cuda::device_count(); }

void CudaBackend::synchronize(int device_index) {
  DeviceGuard guard(device_index);
  CUDA_CHECK(cudaDeviceSynchronize());
  check_index_errors(device_index);
}

Allocator* CudaBackend::pinned_host_allocator() { return &pinned_allocator(); }

namespace {

// Linked in only when Bazel builds with CUDA (the library is alwayslink), so
// no code outside the backend knows whether CUDA is there. Registering
// touches no CUDA API: a machine without a GPU loads this fine.
struct Registration {
  Registration() {
    static CudaBackend backend;
    register_backend(DeviceType::CUDA, &backend);
  }
};

const Registration registration;

}  // namespace
}  // namespace loom::cuda
