// The host caching allocator: blocks are reused, and the stats say so.
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom {
namespace {

// The size classes both host caching allocators use (hand-computed).
TEST(SizeClass, AtMostASixteenthAboveTheRequestInBlocks) {
  EXPECT_EQ(size_class(0, 64), 64u);
  EXPECT_EQ(size_class(1, 64), 64u);
  EXPECT_EQ(size_class(65, 64), 128u);
  EXPECT_EQ(size_class(1024, 64), 1024u);  // 1024 / 16 = 64: steps of the block
  EXPECT_EQ(size_class(1025, 64), 1088u);
  EXPECT_EQ(size_class(5000, 64), 5120u);  // top 4096: steps of 256
  EXPECT_EQ(size_class(5000, 512), 5120u);
  EXPECT_EQ(size_class(100, 512), 512u);
  EXPECT_EQ(size_class((1 << 20) + 1, 64), (1u << 20) + (1u << 16));
  for (size_t n : {size_t{1} << 10, size_t{3000}, size_t{123457}, size_t{1} << 30})
    EXPECT_LE(size_class(n, 64), n + n / 16 + 64) << n;  // never more than a sixteenth (plus a block) above
}

TEST(CpuAllocator, ReusesFreedBlocksOfTheSameSize) {
  empty_cache(Device::cpu());
  { Tensor warm = empty({1 << 20}); }
  const MemoryStats before = memory_stats(Device::cpu());
  for (int step = 0; step < 10; ++step) {
    Tensor a = empty({1 << 20});  // 4 MiB, the same size every step
  }
  const MemoryStats after = memory_stats(Device::cpu());
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

TEST(CpuAllocator, StatsTrackAllocatedPeakAndReserved) {
  empty_cache(Device::cpu());
  reset_peak_memory_stats(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).allocated_bytes;
  {
    Tensor a = empty({1 << 18});  // 1 MiB
    Tensor b = empty({1 << 18});
    MemoryStats s = memory_stats(Device::cpu());
    EXPECT_GE(s.allocated_bytes - base, 2 << 20);
    EXPECT_GE(s.peak_allocated_bytes, s.allocated_bytes);
  }
  MemoryStats s = memory_stats(Device::cpu());
  EXPECT_EQ(s.allocated_bytes, base);
  EXPECT_GE(s.reserved_bytes - s.allocated_bytes, 2 << 20);  // cached, not returned
  EXPECT_GE(s.peak_allocated_bytes - base, 2 << 20);
  empty_cache(Device::cpu());
  EXPECT_EQ(memory_stats(Device::cpu()).reserved_bytes, memory_stats(Device::cpu()).allocated_bytes);
}

TEST(CpuAllocator, HugeRequestIsAClearError) {
  EXPECT_THROW_MSG(empty({int64_t{1} << 50}), "out of memory: failed to allocate");
  EXPECT_THROW_MSG(empty({int64_t{1} << 40, int64_t{1} << 40}), "needs more bytes than fit in 64 bits");
}

}  // namespace
}  // namespace loom
