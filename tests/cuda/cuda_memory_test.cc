// The CUDA caching allocator (reuse without cudaMalloc, statistics, splitting
// and merging, out-of-memory errors, blocks used on a second stream) and the
// pinned host allocator.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tensor/backend.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::gpu_device;

// tools/gpu_run.sh --sanitize turns caching off; then there is nothing to cache.
#define SKIP_WITHOUT_CACHING()                                                             \
  do {                                                                                     \
    if (std::getenv("LOOM_CUDA_NO_CACHING") != nullptr)                                    \
      GTEST_SKIP() << "LOOM_CUDA_NO_CACHING is set (a sanitizer run): caching is off";     \
  } while (0)

TEST(CudaAllocator, RepeatedSizesReuseBlocksWithoutCudaMalloc) {
  LOOM_REQUIRE_CUDA();
  SKIP_WITHOUT_CACHING();
  { Tensor warm = empty({1 << 20}, {.device = gpu_device()}); }
  const MemoryStats before = memory_stats(gpu_device());
  for (int step = 0; step < 100; ++step) {
    Tensor a = empty({1 << 20}, {.device = gpu_device()});  // 4 MiB
    Tensor b = a + 1.0;                                      // and the op's output
  }
  EXPECT_LE(memory_stats(gpu_device()).system_allocations - before.system_allocations, 2)
      << "at most new segments for the op's output and its scalar operand, then none";
  const MemoryStats middle = memory_stats(gpu_device());
  for (int step = 0; step < 100; ++step) {
    Tensor a = empty({1 << 20}, {.device = gpu_device()});
    Tensor b = a + 1.0;
  }
  EXPECT_EQ(memory_stats(gpu_device()).system_allocations, middle.system_allocations);
}

TEST(CudaAllocator, SmallRequestsShareOneSegment) {
  LOOM_REQUIRE_CUDA();
  SKIP_WITHOUT_CACHING();
  empty_cache(gpu_device());
  const MemoryStats before = memory_stats(gpu_device());
  std::vector<Tensor> small;
  for (int i = 0; i < 100; ++i) small.push_back(empty({100}, {.device = gpu_device()}));  // 400 B each
  EXPECT_LE(memory_stats(gpu_device()).system_allocations - before.system_allocations, 1)
      << "100 small blocks are split out of one 2 MiB segment";
  small.clear();
  // Freed neighbours merge back: the whole segment is free and can be released.
  empty_cache(gpu_device());
  EXPECT_EQ(memory_stats(gpu_device()).reserved_bytes, before.reserved_bytes);
}

TEST(CudaAllocator, StatsTrackAllocatedReservedAndPeak) {
  LOOM_REQUIRE_CUDA();
  SKIP_WITHOUT_CACHING();
  empty_cache(gpu_device());
  reset_peak_memory_stats(gpu_device());
  const int64_t base = memory_stats(gpu_device()).allocated_bytes;
  {
    Tensor a = empty({3 << 20}, {.device = gpu_device()});  // 12 MiB: a segment of its own
    Tensor b = empty({3 << 20}, {.device = gpu_device()});
    const MemoryStats s = memory_stats(gpu_device());
    EXPECT_GE(s.allocated_bytes - base, 24 << 20);
    EXPECT_GE(s.reserved_bytes, s.allocated_bytes);
    EXPECT_GE(s.peak_allocated_bytes, s.allocated_bytes);
  }
  const MemoryStats s = memory_stats(gpu_device());
  EXPECT_EQ(s.allocated_bytes, base);
  EXPECT_GE(s.reserved_bytes - s.allocated_bytes, 24 << 20) << "freed blocks stay cached";
  EXPECT_GE(s.peak_allocated_bytes - base, 24 << 20);
  const int64_t frees = s.system_frees;
  empty_cache(gpu_device());
  const MemoryStats after = memory_stats(gpu_device());
  EXPECT_LT(after.reserved_bytes, s.reserved_bytes);
  EXPECT_GT(after.system_frees, frees);
}

TEST(CudaAllocator, OutOfMemoryIsAClearErrorWithTheRequestAndStats) {
  LOOM_REQUIRE_CUDA();
  SKIP_WITHOUT_CACHING();
  EXPECT_THROW_MSG(empty({int64_t{1} << 48}, {.device = gpu_device()}), "CUDA out of memory: tried to allocate");
  EXPECT_THROW_MSG(empty({int64_t{1} << 48}, {.device = gpu_device()}), "on cuda:0 after emptying the cache");
  EXPECT_THROW_MSG(empty({int64_t{1} << 48}, {.device = gpu_device()}), "system_allocs=");
  // The allocator still works afterwards.
  EXPECT_EQ(sum(ones({1000}, {.device = gpu_device()})).item(), 1000);
}

// A block freed while another stream may still read it must not be handed
// out before that stream is done: record_stream() says so.
TEST(CudaAllocator, RecordStreamKeepsABlockFromReuseUntilTheOtherStreamIsDone) {
  LOOM_REQUIRE_CUDA();
  SKIP_WITHOUT_CACHING();
  using namespace cuda;
  Stream side = Stream::from_pool(0);
  const Shape shape{5 << 20};  // 20 MiB: a size nothing else here allocates
  Tensor result;
  void* address = nullptr;
  {
    Tensor x = full(shape, 3.0, {.device = gpu_device()});  // on the default stream
    address = x.storage()->data();
    Event ready;
    ready.record(current_stream(0));
    ready.wait(side);
    {
      StreamGuard guard(side);
      // Milliseconds of work queued on `side` before it reads x.
      Tensor busy = randn({2048, 2048}, {.device = gpu_device()});
      for (int i = 0; i < 20; ++i) busy = mm(busy, busy) * 0.001;
      result = x * 2.0;
    }
    record_stream(x, side);
  }  // x is freed here, long before `side` reads it
  Tensor y = full(shape, -1.0, {.device = gpu_device()});  // same size, default stream
  EXPECT_NE(y.storage()->data(), address) << "the block was reused while `side` still needed it";
  side.synchronize();
  EXPECT_EQ(amin(result).item(), 6.0);
  EXPECT_EQ(amax(result).item(), 6.0);
}

TEST(CudaAllocator, RecordStreamChecksItsArguments) {
  LOOM_REQUIRE_CUDA();
  EXPECT_THROW_MSG(cuda::record_stream(zeros({2}), cuda::current_stream(0)), "record_stream: expected a CUDA tensor");
}

TEST(CudaPinned, PinnedTensorsCopyAsynchronouslyAndAreReused) {
  LOOM_REQUIRE_CUDA();
  Tensor staging = empty_pinned({1 << 20});
  ASSERT_TRUE(is_pinned(staging));
  staging.copy_(arange(0, 1 << 20, 1));
  Tensor on_gpu = staging.to(gpu_device());  // returns before the copy is done
  EXPECT_EQ(sum(on_gpu.to(kFloat64)).item(), 0.5 * (1 << 20) * ((1 << 20) - 1));
  // Pinned blocks are cached like device blocks.
  Allocator& pinned = *backend_for(DeviceType::CUDA).pinned_host_allocator();
  const int64_t allocations = pinned.stats().system_allocations;
  for (int i = 0; i < 10; ++i) {
    Tensor buffer = empty_pinned({1 << 20});
    buffer.fill_(i);
    Tensor copy = buffer.to(gpu_device());
    EXPECT_EQ(copy.sum().item(), static_cast<double>(i) * (1 << 20));
  }
  EXPECT_LE(pinned.stats().system_allocations - allocations, 1);
}

}  // namespace
}  // namespace loom
