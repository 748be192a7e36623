#include "tensor/cuda/device.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/error.h"

namespace loom::cuda {
namespace {

struct DeviceTable {
  int count = 0;
  std::string reason;
  std::vector<std::unique_ptr<cudaDeviceProp>> properties;
  std::vector<std::once_flag> properties_once;
};

DeviceTable& table() {
  // Never destroyed: tensors in static objects may be freed after main().
  static DeviceTable* t = [] {
    auto* table = new DeviceTable();
    int count = 0;
    // Without a driver this returns cudaErrorInsufficientDriver, without a
    // GPU cudaErrorNoDevice: both mean "no CUDA here", not a failure.
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      cudaGetLastError();
      count = 0;
      table->reason = std::string(cudaGetErrorString(status)) + " (" + cudaGetErrorName(status) + ")";
    } else if (count == 0) {
      table->reason = "no CUDA-capable device was found";
    }
    table->count = count;
    table->properties.resize(count);
    table->properties_once = std::vector<std::once_flag>(count);
    return table;
  }();
  return *t;
}

// Whether the calling thread has chosen a device through loom (DeviceGuard,
// set_thread_device): only then is there a device worth restoring.
thread_local bool chose_device = false;

}  // namespace

int device_count() { return table().count; }

const std::string& no_device_reason() { return table().reason; }

void check_device(int index) {
  const DeviceTable& t = table();
  if (index >= 0 && index < t.count) return;
  if (t.count == 0)
    LOOM_FAIL("cuda:", index, " is not available: this machine has no usable CUDA device (",
              t.reason, ")");
  LOOM_FAIL("cuda:", index, " is not available: this machine has ", t.count, " CUDA device",
            t.count == 1 ? "" : "s", " (cuda:0 to cuda:", t.count - 1, ")");
}

const cudaDeviceProp& device_properties(int index) {
  check_device(index);
  DeviceTable& t = table();
  std::call_once(t.properties_once[index], [&] {
    auto props = std::make_unique<cudaDeviceProp>();
    CUDA_CHECK(cudaGetDeviceProperties(props.get(), index));
    t.properties[index] = std::move(props);
  });
  return *t.properties[index];
}

int multiprocessor_count(int index) { return device_properties(index).multiProcessorCount; }

DeviceGuard::DeviceGuard(int index) {
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != index) {
    check_device(index);
    CUDA_CHECK(cudaSetDevice(index));
    if (chose_device) previous_ = current;
  }
  chose_device = true;
}

DeviceGuard::DeviceGuard(int index, std::nothrow_t) noexcept {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || (current != index && cudaSetDevice(index) != cudaSuccess)) {
    cudaGetLastError();
    ok_ = false;
    return;
  }
  if (current != index && chose_device) previous_ = current;
  chose_device = true;
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring can only fail if the context is gone.
  if (previous_ >= 0) cudaSetDevice(previous_);
}

void set_thread_device(int index) {
  check_device(index);
  CUDA_CHECK(cudaSetDevice(index));
  chose_device = true;
}

}  // namespace loom::cuda
