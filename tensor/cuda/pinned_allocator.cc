#include "tensor/cuda/pinned_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/error.h"
#include "tensor/host_waits.h"

namespace loom::cuda {
namespace {

constexpr size_t kMinBlock = 512;


struct PinnedBlock {
  size_t size = 0;
  bool allocated = false;
  int pending_events = 0;
  std::vector<std::pair<cudaStream_t, int>> used_on;  // (stream, device)
};

struct PendingEvent {
  cudaEvent_t event;
  int device;
  void* block;
};

class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    const size_t size = size_class(nbytes, kMinBlock);
    std::unique_lock<std::mutex> lock(mutex_);
    process_events();
    void* ptr = nullptr;
    auto& list = free_[size];
    if (!list.empty()) {
      ptr = list.back();
      list.pop_back();
    } else {
      cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
      if (status != cudaSuccess) {
        cudaGetLastError();
        release_cached(lock);
        status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
      }
      if (status != cudaSuccess) {
        cudaGetLastError();
        LOOM_FAIL_OUT_OF_MEMORY("out of pinned host memory: cudaHostAlloc of ", nbytes, " bytes failed: ",
                                cudaGetErrorString(status), " (", stats_, ")");
      }
      ++stats_.system_allocations;
      stats_.reserved_bytes += static_cast<int64_t>(size);
      blocks_[ptr].size = size;
    }
    PinnedBlock& block = blocks_[ptr];
    block.allocated = true;
    stats_.allocated(size);
    return ptr;
  }

  // Never throws (it runs in Storage's destructor).
  void deallocate(void* ptr, size_t) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second.allocated) return;
    PinnedBlock& block = it->second;
    block.allocated = false;
    stats_.freed(block.size);
    for (const auto& [stream, device] : block.used_on) {
      DeviceGuard on_device(device, std::nothrow);  // the event is made and recorded on the stream's device
      cudaEvent_t event = on_device.ok() ? take_event(device) : nullptr;
      if (event == nullptr || cudaEventRecord(event, stream) != cudaSuccess) {
        cudaGetLastError();
        ++block.pending_events;  // cannot tell when it is safe: keep it out of use
        continue;
      }
      pending_.push_back({event, device, ptr});
      ++block.pending_events;
    }
    block.used_on.clear();
    if (block.pending_events == 0) free_[block.size].push_back(ptr);
  }

  MemoryStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.reset_peak();
  }

  void empty_cache() override {
    std::unique_lock<std::mutex> lock(mutex_);
    release_cached(lock);
  }

  void record_use(void* ptr, cudaStream_t stream, int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end() || !it->second.allocated) return;
    auto& used = it->second.used_on;
    const std::pair<cudaStream_t, int> entry{stream, device};
    if (std::find(used.begin(), used.end(), entry) == used.end()) used.push_back(entry);
  }

 private:
  void process_events() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      cudaError_t status = cudaEventQuery(it->event);
      if (status == cudaErrorNotReady) {
        cudaGetLastError();
        ++it;
        continue;
      }
      if (status != cudaSuccess) cudaGetLastError();
      finish_event(*it);
      it = pending_.erase(it);
    }
  }

  void finish_event(const PendingEvent& entry) {
    events_[entry.device].push_back(entry.event);
    PinnedBlock& block = blocks_[entry.block];
    if (--block.pending_events == 0 && !block.allocated) free_[block.size].push_back(entry.block);
  }

  // Waits for the pending blocks, then gives every free block back. Called
  // with `lock` held; it waits (cudaEventSynchronize, and cudaFreeHost, which
  // waits for the device) with the lock released, as the device allocator
  // does: a copy queued behind a kernel that never ends by itself (an NCCL
  // collective whose peer died) must not block every other thread's frees.
  void release_cached(std::unique_lock<std::mutex>& lock) {
    std::deque<PendingEvent> waiting;
    waiting.swap(pending_);  // their blocks stay out of the free lists until finish_event
    lock.unlock();
    for (const PendingEvent& entry : waiting) {
      count_host_wait();  // noexcept path; a capture allocates no pinned memory
      if (cudaEventSynchronize(entry.event) != cudaSuccess) cudaGetLastError();
    }
    lock.lock();
    for (const PendingEvent& entry : waiting) finish_event(entry);
    std::vector<void*> released;
    for (auto& [size, list] : free_) {
      for (void* ptr : list) {
        blocks_.erase(ptr);
        ++stats_.system_frees;
        stats_.reserved_bytes -= static_cast<int64_t>(size);
        released.push_back(ptr);
      }
      list.clear();
    }
    lock.unlock();
    for (void* ptr : released)
      if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
    lock.lock();
  }

  // An event of `device` (the current device when called).
  cudaEvent_t take_event(int device) {
    auto& pool = events_[device];
    if (!pool.empty()) {
      cudaEvent_t event = pool.back();
      pool.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return event;
  }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, PinnedBlock> blocks_;  // every block loom holds, in use or cached
  std::deque<PendingEvent> pending_;
  std::map<int, std::vector<cudaEvent_t>> events_;
  MemoryStats stats_;
};

PinnedHostAllocator& instance() {
  static auto* allocator = new PinnedHostAllocator();  // never destroyed
  return *allocator;
}

}  // namespace

Allocator& pinned_allocator() { return instance(); }

void record_pinned_use(void* block, CUstream_st* stream, int device) {
  instance().record_use(block, stream, device);
}

}  // namespace loom::cuda
