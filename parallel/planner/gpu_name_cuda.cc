#include <cuda_runtime_api.h>

#include "parallel/planner/gpu_name.h"

namespace loom::parallel {

std::string gpu_name(Device device) {
  cudaDeviceProp props{};
  if (!device.is_cuda() || cudaGetDeviceProperties(&props, device.index()) != cudaSuccess) return "";
  return props.name;
}

}  // namespace loom::parallel
