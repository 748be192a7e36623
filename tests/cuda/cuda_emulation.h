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
// __syncwarp and __shfl_xor_sync (called by every lane of a warp together),
// the block's dynamic shared memory (filled with NaN, since a GPU does not
// clear it, so that reading what no thread wrote shows), atomicAdd, and the
// few intrinsics of tensor/cuda/device_math.cuh. Kernels may not use static
// __shared__ arrays.
//
// For the tensor-core kernels (tensor/cuda/attention_tensor_core.cuh):
// __nv_bfloat16, which rounds to nearest even from float as CUDA's does, and
// nvcuda::wmma's 16 x 16 x 16 fragments, with load_matrix_sync,
// fill_fragment, mma_sync (products in float, accumulated in float) and
// store_matrix_sync of float accumulators. A fragment holds its whole tile
// in every lane, and every lane computes it in full; only lane 0 stores, so
// a kernel's other lanes must __syncwarp() before reading what it stored, as
// on a GPU. Loads and stores check WMMA's rules: 32-byte aligned pointers,
// ldm a multiple of 16 bytes.
#pragma once

#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
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
  Block(int threads, size_t shared_bytes) : barrier(threads), shared((shared_bytes + 127) / 128) {
    for (int first = 0; first < threads; first += 32)
      warps.push_back(std::make_unique<Warp>(threads - first < 32 ? threads - first : 32));
    if (!shared.empty())  // all-ones bits: NaN in float and double
      std::memset(shared.data(), 0xff, shared.size() * sizeof(Chunk));
  }

  struct alignas(128) Chunk {  // as a GPU aligns dynamic shared memory (WMMA needs 32 bytes)
    unsigned char bytes[128];
  };
  Barrier barrier;
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<Chunk> shared;
};

inline thread_local Block* current_block = nullptr;

}  // namespace loom::cuda::emulation

inline void __syncthreads() { loom::cuda::emulation::current_block->barrier.wait(); }
inline void __syncwarp(unsigned /*member_mask*/ = 0xffffffffu) {
  loom::cuda::emulation::current_block->warps[threadIdx.x / 32]->barrier.wait();
}

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

// One lock for every address: threads that add to the same element each
// see the other's sum, as on a GPU.
template <typename T>
T atomicAdd(T* address, T value) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const T old = *address;
  *address = old + value;
  return old;
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

namespace loom::cuda::emulation {

// bfloat16: the high 16 bits of a float, rounded to nearest even.
struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  BFloat16(float x) {
    uint32_t u;
    std::memcpy(&u, &x, sizeof(u));
    bits = std::isnan(x) ? uint16_t{0x7fc0} : static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  operator float() const {
    const uint32_t u = uint32_t{bits} << 16;
    float x;
    std::memcpy(&x, &u, sizeof(x));
    return x;
  }
};

}  // namespace loom::cuda::emulation

using __nv_bfloat16 = loom::cuda::emulation::BFloat16;

namespace loom::cuda {  // what half.cuh's widen does on a GPU
inline float widen(__nv_bfloat16 x) { return x; }
}  // namespace loom::cuda

namespace nvcuda::wmma {

struct matrix_a;
struct matrix_b;
struct accumulator;
struct row_major;
struct col_major;
enum layout_t { mem_row_major, mem_col_major };

// x[row][col] of the fragment's matrix: A (m x k), B (k x n) or C (m x n).
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has the 16 x 16 x 16 shape only");
  T x[16][16];
};

namespace detail {
inline void check_wmma_rules(const void* p, unsigned ldm, size_t element_bytes) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || ldm * element_bytes % 16 != 0) {
    std::fprintf(stderr, "wmma: pointer %p not 32-byte aligned or ldm %u not a multiple of 16 bytes\n", p, ldm);
    std::abort();
  }
}
}  // namespace detail

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm) {
  static_assert(std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>);
  detail::check_wmma_rules(p, ldm, sizeof(T));
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c) f.x[r][c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[r + c * ldm];
}

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, T value) {
  for (auto& row : f.x)
    for (T& x : row) x = value;
}

// d = a b + c; d may be c.
template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b, const fragment<accumulator, 16, 16, 16, float>& c) {
  float a_wide[16][16], b_wide[16][16], sum[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      a_wide[i][j] = a.x[i][j];
      b_wide[i][j] = b.x[i][j];
    }
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      sum[m][n] = c.x[m][n];
      for (int k = 0; k < 16; ++k) sum[m][n] += a_wide[m][k] * b_wide[k][n];
    }
  std::memcpy(d.x, sum, sizeof(sum));
}

// Lane 0 stores; the rest of the warp must __syncwarp() before reading it.
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm,
                              layout_t layout) {
  detail::check_wmma_rules(p, ldm, sizeof(float));
  if (threadIdx.x % 32 != 0) return;
  for (unsigned r = 0; r < 16; ++r)
    for (unsigned c = 0; c < 16; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[r + c * ldm]) = f.x[r][c];
}

}  // namespace nvcuda::wmma

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
