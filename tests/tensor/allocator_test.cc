// The host caching allocator: blocks are reused, and the stats say so.
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom {
namespace {

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
