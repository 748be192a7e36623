// CUB's device-wide sum (cub::DeviceReduce, NVIDIA's own reduction, shipped
// with the CUDA toolkit): the reference cuda_bench times loom's sum over
// everything against. nvcc compiles it (cub_reference.cu); cuda_bench, built
// by the host compiler, calls it through this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace loom::bench {

// Bytes of device scratch cub_sum needs for n floats.
size_t cub_sum_scratch_bytes(int64_t n);

// *out = the sum of in[0, n), queued on `stream`; scratch holds
// cub_sum_scratch_bytes(n) bytes. Returns CUB's status.
cudaError_t cub_sum(const float* in, float* out, int64_t n, void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace loom::bench
