// Runs a CUDA kernel's body on the CPU, so that tests without a GPU can check
// a kernel's logic: its indexing, masking and barriers (not its speed).
//
//   #define LOOM_CUDA_EMULATION
//   #include "tests/cuda/cuda_emulation.h"
//   #include "tensor/cuda/attention_kernels.cuh"
//   emulate_launch({blocks_x, blocks_y, blocks_z}, 256, shared_bytes, kernel<float, float, 64>, args...);
//
// Blocks run one after another; within a block each CUDA thread is an OS
// thread. It provides the CUDA subset those kernels use: threadIdx,
// blockIdx, blockDim, gridDim, __syncthreads (a barrier of the block),
// __shfl_xor_sync (called by every lane of a warp together), the block's
// dynamic shared memory (filled with NaN, since a GPU does not clear it, so
// that reading what no thread wrote shows), and the few intrinsics of
// tensor/cuda/device_math.cuh. Kernels may not use static __shared__ arrays.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

inline thread_local uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace loom::cuda::emulation {

// Waits until `count` threads have arrived; reusable.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++generation_;
      all_arrived_.notify_all();
    } else {
      all_arrived_.wait(lock, [&] { return generation_ != generation; });
    }
  }

 private:
  const int count_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
};

struct Warp {
  explicit Warp(int lanes) : barrier(lanes) {}
  Barrier barrier;
  unsigned char slots[32][8];  // each lane's value, for __shfl_xor_sync
};

struct Block {
  Block(int threads, size_t shared_bytes) : barrier(threads), shared((shared_bytes + 15) / 16) {
    for (int first = 0; first < threads; first += 32)
      warps.push_back(std::make_unique<Warp>(threads - first < 32 ? threads - first : 32));
    if (!shared.empty())  // all-ones bits: NaN in float and double
      std::memset(shared.data(), 0xff, shared.size() * sizeof(Chunk));
  }

  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  Barrier barrier;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<Chunk> shared;
};

inline thread_local Block* current_block = nullptr;

}  // namespace loom::cuda::emulation

inline void __syncthreads() { loom::cuda::emulation::current_block->barrier.wait(); }

// Lane l gets lane (l ^ lane_mask)'s value: every lane writes its slot, all
// wait, every lane reads, all wait again before the slots are reused.
template <typename T>
T __shfl_xor_sync(unsigned /*member_mask*/, T value, int lane_mask) {
  static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
  auto& warp = *loom::cuda::emulation::current_block->warps[threadIdx.x / 32];
  const unsigned lane = threadIdx.x % 32;
  std::memcpy(warp.slots[lane], &value, sizeof(T));
  warp.barrier.wait();
  T result;
  std::memcpy(&result, warp.slots[lane ^ lane_mask], sizeof(T));
  warp.barrier.wait();
  return result;
}

inline void* emulated_dynamic_shared() { return loom::cuda::emulation::current_block->shared.data(); }

inline float __int_as_float(int bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}
inline double __longlong_as_double(long long bits) {
  double x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// kernel(args...) on grid x threads threads, with `shared_bytes` of dynamic
// shared memory per block.
template <typename... Params, typename... Args>
void emulate_launch(dim3 grid, unsigned threads, size_t shared_bytes, void (*kernel)(Params...), const Args&... args) {
  gridDim = grid;
  blockDim = {threads, 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        loom::cuda::emulation::Block block(static_cast<int>(threads), shared_bytes);
        std::vector<std::thread> cuda_threads;
        for (unsigned t = 0; t < threads; ++t)
          cuda_threads.emplace_back([&, t] {
            loom::cuda::emulation::current_block = &block;
            threadIdx = {t, 0, 0};
            blockIdx = {x, y, z};
            kernel(args...);
          });
        for (std::thread& thread : cuda_threads) thread.join();
      }
}
