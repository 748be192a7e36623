// The host caching allocator.
//
// Sizes are rounded up to a size class (at most 1/16 above the request) and
// freed blocks wait in a free list per class. A training step allocates the
// same sizes every time, so after the first step it never calls malloc. Up to
// kMaxCachedBytes wait in the lists; beyond that, blocks go back to the system.
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/error.h"

namespace loom::cpu {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMaxCachedBytes = size_t{4} << 30;


class CpuCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t bytes = size_class(nbytes, kAlignment);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    auto& list = free_[bytes];
    if (!list.empty()) {
      ptr = list.back();
      list.pop_back();
      cached_ -= bytes;
    } else {
      ptr = std::aligned_alloc(kAlignment, bytes);
      if (!ptr) {  // give the cache back and try once more
        release_cached();
        ptr = std::aligned_alloc(kAlignment, bytes);
      }
      if (ptr == nullptr)
        LOOM_FAIL_OUT_OF_MEMORY("out of memory: failed to allocate ", nbytes, " bytes on cpu (", stats_locked(), ")");
      ++stats_.system_allocations;
    }
    stats_.allocated(bytes);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    size_t bytes = size_class(nbytes, kAlignment);
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.freed(bytes);
    if (cached_ + bytes > kMaxCachedBytes) {
      std::free(ptr);
      ++stats_.system_frees;
      return;
    }
    free_[bytes].push_back(ptr);
    cached_ += bytes;
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_locked();
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.reset_peak();
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached();
  }

 private:
  MemoryStats stats_locked() const {
    MemoryStats s = stats_;
    s.reserved_bytes = s.allocated_bytes + static_cast<int64_t>(cached_);
    return s;
  }

  void release_cached() {
    for (auto& [bytes, list] : free_) {
      for (void* p : list) std::free(p);
      stats_.system_frees += static_cast<int64_t>(list.size());
      list.clear();
    }
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0;
  MemoryStats stats_;
};

}  // namespace

Allocator& cpu_allocator() {
  // Never destroyed: tensors in static objects may outlive any static allocator.
  static auto* allocator = new CpuCachingAllocator();
  return *allocator;
}

Allocator& CpuBackend::allocator(int) { return cpu_allocator(); }

CpuBackend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace loom::cpu
