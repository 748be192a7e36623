#include "tensor/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iomanip>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/error.h"

namespace loom::cuda {
namespace {

constexpr size_t kRound = 512;                 // block sizes and alignment
constexpr size_t kSmallRequest = 1 << 20;      // up to 1 MiB: the small pool
constexpr size_t kSmallSegment = 2 << 20;      // the small pool grows by 2 MiB
constexpr size_t kMidRequest = 10 << 20;       // below 10 MiB: shared 20 MiB segments
constexpr size_t kMidSegment = 20 << 20;
constexpr size_t kLargeRound = 2 << 20;        // larger: own segment, rounded to 2 MiB
constexpr size_t kMinLargeRemainder = 1 << 20; // smaller leftovers of large blocks are not split off

size_t round_size(size_t nbytes) { return std::max(kRound, (nbytes + kRound - 1) / kRound * kRound); }

size_t segment_size(size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kMidRequest) return kMidSegment;
  return (size + kLargeRound - 1) / kLargeRound * kLargeRound;
}

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream out;
  if (unit == 0)
    out << bytes << " bytes";
  else
    out << std::fixed << std::setprecision(2) << value << " " << units[unit];
  return out.str();
}

// A piece of a cudaMalloc'ed segment; neighbours in the segment are linked so
// that free neighbours merge back.
struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;  // the stream it was allocated on
  bool small = false;             // which pool
  bool allocated = false;
  int pending_events = 0;         // other streams' work still using it after free
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<cudaStream_t> used_on;  // record_stream()

  bool is_free() const { return !allocated && pending_events == 0; }
};

// Free blocks ordered by stream, then size: lower_bound finds the best fit
// on the requesting stream.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const {
    auto sa = reinterpret_cast<uintptr_t>(a->stream), sb = reinterpret_cast<uintptr_t>(b->stream);
    if (sa != sb) return sa < sb;
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};

using FreeBlocks = std::set<Block*, BlockOrder>;

// LOOM_CUDA_NO_CACHING=1 turns caching off: every tensor gets its own
// cudaMalloc and cudaFree. Slow, but compute-sanitizer then sees each
// tensor's real bounds (inside a cached segment, an overrun into a
// neighbouring block is invisible to it). tools/gpu_run.sh --sanitize sets it.
bool caching_disabled() {
  const char* value = std::getenv("LOOM_CUDA_NO_CACHING");
  return value != nullptr && std::string(value) != "0" && std::string(value) != "";
}

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device) : device_(device), caching_(!caching_disabled()) {}

  void* allocate(size_t nbytes) override {
    if (!caching_) return allocate_uncached(nbytes);
    const size_t size = round_size(nbytes);
    cudaStream_t stream = current_stream(device_).handle();
    DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    process_events();
    const bool small = size <= kSmallRequest;
    FreeBlocks& pool = small ? small_free_ : large_free_;
    Block* block = take_best_fit(pool, stream, size);
    if (block == nullptr) block = new_segment(size, stream, small, nbytes, lock);
    split(block, size, pool);
    block->allocated = true;
    allocated_[block->ptr] = block;
    stats_.allocated(block->size);
    return block->ptr;
  }

  // Never throws (it runs in Storage's destructor); at worst a block leaks.
  void deallocate(void* ptr, size_t nbytes) override {
    if (!caching_) return deallocate_uncached(ptr, nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocated_.find(ptr);
    if (it == allocated_.end()) return;
    Block* block = it->second;
    allocated_.erase(it);
    block->allocated = false;
    stats_.freed(block->size);
    if (!block->used_on.empty()) {
      // Other streams may still read or write the block: it is free only
      // once the work they have queued so far is done.
      DeviceGuard on_device(device_, std::nothrow);  // events are made and recorded on the block's device
      for (cudaStream_t other : block->used_on) {
        cudaEvent_t event = take_event();
        if (event == nullptr || cudaEventRecord(event, other) != cudaSuccess) {
          cudaGetLastError();
          ++block->pending_events;  // cannot tell when it is safe: keep it out of use
          continue;
        }
        pending_.emplace_back(event, block);
        ++block->pending_events;
      }
      block->used_on.clear();
      if (block->pending_events > 0) return;
    }
    free_block(block);
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
    if (!caching_) return;
    DeviceGuard guard(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    release_cached(lock);
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    if (!caching_) return;  // cudaFree waits for the whole device anyway
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = allocated_.find(ptr);
    LOOM_CHECK(it != allocated_.end(), "record_stream: the tensor's memory was not allocated by "
               "loom's allocator on cuda:", device_);
    Block* block = it->second;
    if (stream == block->stream) return;  // its own stream needs no record
    if (std::find(block->used_on.begin(), block->used_on.end(), stream) == block->used_on.end())
      block->used_on.push_back(stream);
  }

 private:
  void* allocate_uncached(size_t nbytes) {
    DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      LOOM_FAIL("CUDA out of memory: tried to allocate ", format_bytes(static_cast<int64_t>(nbytes)), " (", nbytes,
                " bytes) on cuda:", device_, " with caching off (", stats_, "): ", cudaGetErrorString(status));
    }
    ++stats_.system_allocations;
    stats_.allocated(nbytes);
    stats_.reserved_bytes += static_cast<int64_t>(nbytes);
    return ptr;
  }

  // cudaFree waits for all work on the device, so no stream can still use
  // ptr; it waits outside the lock, as release_cached does.
  void deallocate_uncached(void* ptr, size_t nbytes) {
    {
      DeviceGuard on_device(device_, std::nothrow);
      if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.system_frees;
    stats_.freed(nbytes);
    stats_.reserved_bytes -= static_cast<int64_t>(nbytes);
  }

  Block* take_best_fit(FreeBlocks& pool, cudaStream_t stream, size_t size) {
    Block key;
    key.stream = stream;
    key.size = size;
    key.ptr = nullptr;
    auto it = pool.lower_bound(&key);
    if (it == pool.end() || (*it)->stream != stream) return nullptr;
    Block* block = *it;
    pool.erase(it);
    return block;
  }

  // Called with `lock` held; may release it for a while (release_cached).
  Block* new_segment(size_t size, cudaStream_t stream, bool small, size_t requested,
                     std::unique_lock<std::mutex>& lock) {
    const size_t bytes = segment_size(size);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      // Give the cache back and try once more.
      cudaGetLastError();
      release_cached(lock);
      status = cudaMalloc(&ptr, bytes);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      std::string device_memory;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
        device_memory = "; the device has " + format_bytes(free_bytes) + " free of " +
                        format_bytes(total_bytes);
      else
        cudaGetLastError();
      if (status == cudaErrorMemoryAllocation)
        LOOM_FAIL("CUDA out of memory: tried to allocate ", format_bytes(requested), " (", requested,
                  " bytes) on cuda:", device_, " after emptying the cache (", stats_,
                  device_memory, ")");
      LOOM_FAIL("cudaMalloc failed while trying to allocate ", format_bytes(requested), " (", requested,
                " bytes) on cuda:", device_, ": ", cudaGetErrorString(status), " (", stats_, device_memory, ")");
    }
    ++stats_.system_allocations;
    stats_.reserved_bytes += static_cast<int64_t>(bytes);
    auto* block = new Block();
    block->ptr = ptr;
    block->size = bytes;
    block->stream = stream;
    block->small = small;
    return block;
  }

  // Splits the tail off `block` when it is big enough to serve another request.
  void split(Block* block, size_t size, FreeBlocks& pool) {
    const size_t rest = block->size - size;
    if (rest < (block->small ? kRound : kMinLargeRemainder)) return;
    auto* tail = new Block();
    tail->ptr = static_cast<char*>(block->ptr) + size;
    tail->size = rest;
    tail->stream = block->stream;
    tail->small = block->small;
    tail->prev = block;
    tail->next = block->next;
    if (block->next != nullptr) block->next->prev = tail;
    block->next = tail;
    block->size = size;
    pool.insert(tail);
  }

  // Returns a block to its pool, merged with free neighbours.
  void free_block(Block* block) {
    FreeBlocks& pool = block->small ? small_free_ : large_free_;
    if (block->prev != nullptr && block->prev->is_free()) {
      Block* prev = block->prev;
      pool.erase(prev);
      prev->size += block->size;
      prev->next = block->next;
      if (block->next != nullptr) block->next->prev = prev;
      delete block;
      block = prev;
    }
    if (block->next != nullptr && block->next->is_free()) {
      Block* next = block->next;
      pool.erase(next);
      block->size += next->size;
      block->next = next->next;
      if (next->next != nullptr) next->next->prev = block;
      delete next;
    }
    pool.insert(block);
  }

  // Frees the blocks whose other-stream work has finished.
  void process_events() {
    for (auto it = pending_.begin(); it != pending_.end();) {
      cudaError_t status = cudaEventQuery(it->first);
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

  void finish_event(const std::pair<cudaEvent_t, Block*>& entry) {
    event_pool_.push_back(entry.first);
    Block* block = entry.second;
    if (--block->pending_events == 0) free_block(block);
  }

  // Waits for pending blocks, then gives every wholly free segment back to
  // CUDA. Called with `lock` held; it waits (cudaEventSynchronize, and
  // cudaFree, which waits for the whole device) with the lock released: a
  // kernel that never ends by itself (an NCCL collective whose peer died)
  // must not block every other thread's frees, among them the NCCL
  // watchdog's, which would then never abort that kernel.
  void release_cached(std::unique_lock<std::mutex>& lock) {
    std::deque<std::pair<cudaEvent_t, Block*>> waiting;
    waiting.swap(pending_);  // their blocks stay out of the pools until finish_event
    lock.unlock();
    for (const auto& entry : waiting)
      if (cudaEventSynchronize(entry.first) != cudaSuccess) cudaGetLastError();
    lock.lock();
    for (const auto& entry : waiting) finish_event(entry);
    const std::vector<Block*> segments = take_free_segments();
    lock.unlock();
    for (Block* segment : segments) {
      if (cudaFree(segment->ptr) != cudaSuccess) cudaGetLastError();
      delete segment;
    }
    lock.lock();
  }

  // Takes every wholly free segment out of the pools, counted as given back.
  std::vector<Block*> take_free_segments() {
    std::vector<Block*> segments;
    for (FreeBlocks* pool : {&small_free_, &large_free_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (block->prev != nullptr || block->next != nullptr) {  // part of a segment in use
          ++it;
          continue;
        }
        ++stats_.system_frees;
        stats_.reserved_bytes -= static_cast<int64_t>(block->size);
        it = pool->erase(it);
        segments.push_back(block);
      }
    }
    return segments;
  }

  cudaEvent_t take_event() {
    if (!event_pool_.empty()) {
      cudaEvent_t event = event_pool_.back();
      event_pool_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return event;
  }

  const int device_;
  const bool caching_;
  mutable std::mutex mutex_;
  FreeBlocks small_free_, large_free_;
  std::unordered_map<void*, Block*> allocated_;
  std::deque<std::pair<cudaEvent_t, Block*>> pending_;
  std::vector<cudaEvent_t> event_pool_;
  MemoryStats stats_;
};

std::vector<CudaCachingAllocator*>& allocators() {
  // Never destroyed: tensors in static objects are freed after main() returns.
  static auto* all = [] {
    auto* v = new std::vector<CudaCachingAllocator*>();
    for (int i = 0; i < device_count(); ++i) v->push_back(new CudaCachingAllocator(i));
    return v;
  }();
  return *all;
}

}  // namespace

Allocator& device_allocator(int device) {
  check_device(device);
  return *allocators()[device];
}

void record_stream(const Tensor& t, const Stream& stream) {
  LOOM_CHECK(t.defined() && t.device().is_cuda(), "record_stream: expected a CUDA tensor, got ",
             t.defined() ? t.device().str() : std::string("an undefined tensor"));
  LOOM_CHECK(t.device().index() == stream.device(), "record_stream: the tensor is on ", t.device(),
             " but the stream is on cuda:", stream.device());
  if (t.storage()->data() == nullptr) return;  // empty tensors own no memory
  check_device(stream.device());
  allocators()[stream.device()]->record_stream(t.storage()->data(), stream.handle());
}

}  // namespace loom::cuda
