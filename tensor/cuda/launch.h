// What every kernel launch needs: the tensor's device made current, its
// current stream, and a grid size.
//
//   void CudaBackend::fill(const Tensor& out, double value) {
//     LaunchContext ctx(out);                     // cuda:N current, ctx.stream = its current stream
//     kernel<<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(...);
//     LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
//   }
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/stream.h"
#include "tensor/tensor.h"

namespace loom::cuda {

constexpr int kBlockSize = 256;

class LaunchContext {
 public:
  explicit LaunchContext(const Tensor& t) : LaunchContext(t.device().index()) {}
  explicit LaunchContext(int device)
      : device(device),
        guard_(device),
        stream(current_stream(device).handle()),
        multiprocessors(multiprocessor_count(device)) {}

  // Blocks for `items` work items, one per thread: enough to cover them, but
  // at most `waves` blocks per multiprocessor (kernels loop over the rest).
  unsigned grid(int64_t items, int threads = kBlockSize, int waves = 32) const {
    const int64_t needed = (items + threads - 1) / threads;
    const int64_t cap = static_cast<int64_t>(multiprocessors) * waves;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min(needed, cap)));
  }

  const int device;

 private:
  DeviceGuard guard_;

 public:
  const cudaStream_t stream;
  const int multiprocessors;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A tensor's data as S (a storage type of half.cuh), or null for an undefined one.
template <typename S>
S* data_of(const Tensor& t) {
  return t.defined() ? static_cast<S*>(t.raw_data()) : nullptr;
}

}  // namespace loom::cuda
