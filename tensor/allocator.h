// Device memory allocators and their statistics.
//
// Every tensor's storage comes from the allocator of its device. Both the host
// and CUDA allocators cache freed blocks by size, so a training loop that
// allocates the same shapes every step stops calling the system allocator
// after its first step.
//
//   MemoryStats s = memory_stats(Device::cpu());
//   std::cout << s;  // allocated=..., reserved=..., peak=..., system_allocs=...
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

#include "tensor/device.h"

namespace loom {

struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors
  int64_t reserved_bytes = 0;        // allocated + cached for reuse
  int64_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  int64_t system_allocations = 0;    // calls to malloc/cudaMalloc so far
  int64_t system_frees = 0;

  // The bookkeeping every allocator shares (under its own lock).
  void allocated(size_t bytes) {
    allocated_bytes += static_cast<int64_t>(bytes);
    if (allocated_bytes > peak_allocated_bytes) peak_allocated_bytes = allocated_bytes;
  }
  void freed(size_t bytes) { allocated_bytes -= static_cast<int64_t>(bytes); }
  void reset_peak() { peak_allocated_bytes = allocated_bytes; }
};

// The size classes of the caching allocators that keep free lists by size:
// `nbytes` rounded up to a multiple of `min_block`, and at most 1/16 above
// it (steps of a sixteenth of the largest power of two <= nbytes), so a few
// classes serve every size with little waste.
inline size_t size_class(size_t nbytes, size_t min_block) {
  size_t step = min_block;
  if (nbytes > 0) {
    const size_t top = size_t{1} << (63 - __builtin_clzll(nbytes));
    if (top / 16 > step) step = top / 16;
  }
  const size_t rounded = (nbytes + step - 1) / step * step;
  return rounded < min_block ? min_block : rounded;
}

std::ostream& operator<<(std::ostream& out, const MemoryStats& stats);

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Never returns null: throws loom::Error (with the stats) when out of memory.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached, unused blocks to the system.
  virtual void empty_cache() = 0;
};

// The allocator of `device`; throws for CUDA when loom was built without it.
Allocator& allocator_for(Device device);
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
void empty_cache(Device device);

}  // namespace loom
