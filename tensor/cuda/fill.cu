// CUDA fill (any strides, any dtype) and arange (contiguous, numeric and 16-bit dtypes).
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/loops.cuh"

namespace loom::cuda {
namespace {

template <typename T>
struct Constant {
  T value;
  __device__ T operator()() const { return value; }
};

// Computed in double, as the CPU does, then converted (16-bit floats through float).
template <typename S>
__global__ void arange_kernel(S* out, int64_t n, double start, double step) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += threads)
    out[i] = narrow_to<S>(start + step * static_cast<double>(i));
}

}  // namespace

void CudaBackend::fill(const Tensor& out, double value) {
  dispatch_any_storage(out.dtype(), "fill", [&](auto storage, auto) {
    using S = decltype(storage);
    launch_elementwise<0, S>(out, {}, Constant<S>{narrow_to<S>(value)});  // 16-bit through float, as the CPU
  });
}

void CudaBackend::arange(const Tensor& out, double start, double step) {
  dispatch_numeric_or_16bit(out.dtype(), "arange", [&](auto storage, auto) {
    using S = decltype(storage);
    const int64_t n = out.numel();
    if (n == 0) return;
    LaunchContext ctx(out);
    arange_kernel<S><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(static_cast<S*>(out.raw_data()), n, start, step);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

}  // namespace loom::cuda
