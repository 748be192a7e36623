#include "bench/cub_reference.h"

#include <cub/device/device_reduce.cuh>

namespace loom::bench {

size_t cub_sum_scratch_bytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceReduce::Sum(nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr), n);
  return bytes;
}

cudaError_t cub_sum(const float* in, float* out, int64_t n, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  return cub::DeviceReduce::Sum(scratch, scratch_bytes, in, out, n, stream);
}

}  // namespace loom::bench
