// CUDA random draws: element i of each draw is random_draw.h's function of
// (seed, offset, i), the very code the CPU backend runs, so both devices give
// the same numbers for the same generator state.
//
// A draw captured into a CUDA graph (tensor/cuda/graph.h) reads its seed and
// offset origin from device memory when the kernel runs, so that each replay
// draws new numbers: the same ones an uncaptured step at that point would.
//
// This file is compiled with --fmad=false: nvcc would otherwise fuse
// `lo + (hi - lo) * u` into one FMA, rounding differently from the host.
// Uniform, randint and bernoulli draws are then bit-identical to the CPU's;
// normal draws also call log and cos, whose last bit may differ between
// CUDA's and glibc's double versions (CUDA: at most 1 and 2 ulp). 16-bit
// floats take the draw through float32, as the CPU does.
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/random_draw.h"

namespace loom::cuda {
namespace {

// A draw stored as S, as the CPU stores it (16-bit floats through float).
template <typename S, typename V>
__device__ __forceinline__ S store(V draw) {
  return narrow_to<S>(draw);
}

template <typename S, RandomOp OP>
__global__ void random_kernel(S* out, int64_t n, double a, double b, uint64_t seed, uint64_t offset,
                              const uint64_t* device_state) {
  if (device_state != nullptr) {
    seed = device_state[0];
    offset += device_state[1];
  }
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += threads) {
    const uint64_t index = static_cast<uint64_t>(i);
    if constexpr (OP == RandomOp::Uniform)
      out[i] = store<S>(random_draw::uniform(seed, offset, index, a, b));
    else if constexpr (OP == RandomOp::Normal)
      out[i] = store<S>(random_draw::normal(seed, offset, index, a, b));
    else if constexpr (OP == RandomOp::RandInt)
      out[i] = store<S>(random_draw::randint(seed, offset, index, static_cast<int64_t>(a), static_cast<int64_t>(b)));
    else
      out[i] = store<S>(random_draw::bernoulli(seed, offset, index, a));
  }
}

template <typename T, RandomOp OP>
void launch_random(const Tensor& out, double a, double b, const Draw& draw) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  random_kernel<T, OP><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(static_cast<T*>(out.raw_data()), n, a, b,
                                                                     draw.seed, draw.offset, draw.device_state);
  LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
}

}  // namespace

void CudaBackend::random(RandomOp op, const Tensor& out, double a, double b, const Draw& draw) {
  dispatch_any_storage(out.dtype(), "random", [&](auto storage, auto) {
    using T = decltype(storage);
    switch (op) {
      case RandomOp::Uniform: return launch_random<T, RandomOp::Uniform>(out, a, b, draw);
      case RandomOp::Normal: return launch_random<T, RandomOp::Normal>(out, a, b, draw);
      case RandomOp::RandInt: return launch_random<T, RandomOp::RandInt>(out, a, b, draw);
      case RandomOp::Bernoulli: return launch_random<T, RandomOp::Bernoulli>(out, a, b, draw);
    }
  });
}

}  // namespace loom::cuda
