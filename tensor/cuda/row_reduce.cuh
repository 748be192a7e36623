// Reductions over the threads that share one row: a warp (GROUP = 32) or a
// whole block (GROUP = blockDim.x, a multiple of 32, at most 1024). Every
// thread of the group gets the result.
//
//   __shared__ float scratch[kMaxWarps];
//   float total = row_allreduce<256>(partial, Plus<float>(), scratch);
#pragma once

namespace loom::cuda {

constexpr int kMaxWarps = 32;

template <typename T>
struct Max {
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};

template <typename T>
struct Plus {
  __device__ T operator()(T a, T b) const { return a + b; }
};

// `scratch` holds GROUP / 32 values in shared memory. A block-wide call
// synchronises the block, so all its threads must make it.
template <int GROUP, typename T, typename F>
__device__ __forceinline__ T row_allreduce(T v, F f, T* scratch) {
  static_assert(GROUP % 32 == 0 && GROUP / 32 <= kMaxWarps, "a group is a warp or a block");
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, mask));
  if constexpr (GROUP > 32) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // earlier readers of scratch are done with it
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[0];
#pragma unroll
    for (int w = 1; w < GROUP / 32; ++w) v = f(v, scratch[w]);
  }
  return v;
}

}  // namespace loom::cuda
