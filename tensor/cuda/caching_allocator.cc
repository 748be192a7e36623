#include "tensor/cuda/caching_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/cuda/block_pool.h"
#include "tensor/cuda/device.h"
#include "tensor/error.h"
#include "tensor/host_waits.h"

namespace loom::cuda {
namespace {

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

// LOOM_CUDA_NO_CACHING=1 turns caching off: every tensor gets its own
// cudaMalloc and cudaFree. Slow, but compute-sanitizer then sees each
// tensor's real bounds (inside a cached segment, an overrun into a
// neighbouring block is invisible to it). tools/gpu_run.sh --sanitize sets it.
bool caching_disabled() {
  const char* value = std::getenv("LOOM_CUDA_NO_CACHING");
  return value != nullptr && std::string(value) != "0" && std::string(value) != "";
}

// cudaMalloc is a "potentially unsafe" call for a thread that captures a
// CUDA graph in cudaStreamCaptureModeThreadLocal (graph.cc), though it
// touches no stream: it is allowed for the scope of this guard, as CUDA's
// documentation of cudaThreadExchangeStreamCaptureMode shows.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// What the block pool asks of cuda:device: cudaMalloc'ed segments and events.
class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int device) : device_(device) {}

  void* allocate_segment(size_t bytes) override {
    void* ptr = nullptr;
    RelaxedCaptureMode relaxed;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaSuccess) return ptr;
    cudaGetLastError();
    if (status == cudaErrorMemoryAllocation) return nullptr;
    LOOM_FAIL("cudaMalloc failed while trying to allocate ", format_bytes(static_cast<int64_t>(bytes)),
              " on cuda:", device_, ": ", cudaGetErrorString(status), device_memory());
  }

  void free_segment(void* ptr) noexcept override {
    DeviceGuard on_device(device_, std::nothrow);
    if (cudaFree(ptr) != cudaSuccess) cudaGetLastError();
  }

  // Events are made and recorded on the stream's device (deallocation may
  // run on any thread, with any device current).
  Mark mark(StreamKey stream) noexcept override {
    DeviceGuard on_device(device_, std::nothrow);
    if (!on_device.ok()) return nullptr;
    cudaEvent_t event = nullptr;
    if (!events_.empty()) {
      event = events_.back();
      events_.pop_back();
    } else if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    if (cudaEventRecord(event, static_cast<cudaStream_t>(const_cast<void*>(stream))) != cudaSuccess) {
      cudaGetLastError();
      events_.push_back(event);
      return nullptr;
    }
    return event;
  }

  bool passed(Mark mark) noexcept override {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(mark));
    if (status == cudaSuccess) return true;
    cudaGetLastError();
    return status != cudaErrorNotReady;  // a failed event counts as passed
  }

  void wait(Mark mark) noexcept override {
    count_host_wait();  // never inside a capture: BlockPool does not wait then
    if (cudaEventSynchronize(static_cast<cudaEvent_t>(mark)) != cudaSuccess) cudaGetLastError();
  }

  void recycle(Mark mark) noexcept override { events_.push_back(static_cast<cudaEvent_t>(mark)); }

  [[noreturn]] void out_of_memory(size_t requested, const MemoryStats& stats) override {
    LOOM_FAIL_OUT_OF_MEMORY("CUDA out of memory: tried to allocate ", format_bytes(static_cast<int64_t>(requested)),
                            " (", requested, " bytes) on cuda:", device_, " after emptying the cache (", stats,
                            device_memory(), ")");
  }

 private:
  static std::string device_memory() {
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      cudaGetLastError();
      return "";
    }
    return "; the device has " + format_bytes(static_cast<int64_t>(free_bytes)) + " free of " +
           format_bytes(static_cast<int64_t>(total_bytes));
  }

  const int device_;
  std::vector<cudaEvent_t> events_;  // recycled; used under the pool's lock
};

class CudaCachingAllocator final : public Allocator {
 public:
  explicit CudaCachingAllocator(int device)
      : device_(device), caching_(!caching_disabled()), memory_(device), pool_(memory_) {}

  void* allocate(size_t nbytes) override {
    if (!caching_) return allocate_uncached(nbytes);
    cudaStream_t stream = current_stream(device_).handle();
    DeviceGuard guard(device_);  // cudaMalloc acts on the current device
    return pool_.allocate(nbytes, stream);
  }

  // Never throws (it runs in Storage's destructor); at worst a block leaks.
  void deallocate(void* ptr, size_t nbytes) override {
    if (!caching_) return deallocate_uncached(ptr, nbytes);
    pool_.deallocate(ptr);
  }

  MemoryStats stats() const override {
    if (caching_) return pool_.stats();
    std::lock_guard<std::mutex> lock(mutex_);
    return uncached_stats_;
  }

  void reset_peak() override {
    if (caching_) return pool_.reset_peak();
    std::lock_guard<std::mutex> lock(mutex_);
    uncached_stats_.reset_peak();
  }

  void empty_cache() override {
    if (!caching_) return;
    DeviceGuard guard(device_);
    pool_.empty_cache();
  }

  void record_stream(void* ptr, cudaStream_t stream) {
    if (!caching_) return;  // cudaFree waits for the whole device anyway
    LOOM_CHECK(pool_.record_use(ptr, stream), "record_stream: the tensor's memory was not allocated by "
               "loom's allocator on cuda:", device_);
  }

  // With caching off, every tensor released during a capture is kept (its
  // cudaFree would wait for the device, which a capture forbids).
  void begin_capture(cudaStream_t stream) {
    if (caching_) return pool_.begin_capture(stream);
    std::lock_guard<std::mutex> lock(mutex_);
    LOOM_CHECK(!uncached_capturing_, "a CUDA graph capture began while another is under way on cuda:", device_);
    uncached_capturing_ = true;
    uncached_capture_kept_.clear();
  }

  std::vector<void*> end_capture() {
    if (caching_) return pool_.end_capture();
    std::lock_guard<std::mutex> lock(mutex_);
    uncached_capturing_ = false;
    std::vector<void*> kept;
    kept.swap(uncached_capture_kept_);
    return kept;
  }

  void release_after_replays(const std::vector<void*>& kept, cudaStream_t replay) {
    if (caching_) return pool_.release_after_replays(kept, replay);
    for (void* ptr : kept) {
      size_t nbytes = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = uncached_kept_.find(ptr);
        if (it == uncached_kept_.end()) continue;
        nbytes = it->second;
        uncached_kept_.erase(it);
      }
      deallocate_uncached(ptr, nbytes);  // cudaFree waits for the replays
    }
  }

 private:
  void* allocate_uncached(size_t nbytes) {
    DeviceGuard guard(device_);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = nullptr;
    RelaxedCaptureMode relaxed;
    const cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      LOOM_FAIL_OUT_OF_MEMORY("CUDA out of memory: tried to allocate ", format_bytes(static_cast<int64_t>(nbytes)),
                              " (", nbytes, " bytes) on cuda:", device_, " with caching off (", uncached_stats_,
                              "): ", cudaGetErrorString(status));
    }
    ++uncached_stats_.system_allocations;
    uncached_stats_.allocated(nbytes);
    uncached_stats_.reserved_bytes += static_cast<int64_t>(nbytes);
    return ptr;
  }

  // cudaFree waits for all work on the device, so no stream can still use
  // ptr; it waits outside the lock, as the pool's empty_cache does.
  void deallocate_uncached(void* ptr, size_t nbytes) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (uncached_capturing_) {
        uncached_kept_.emplace(ptr, nbytes);
        uncached_capture_kept_.push_back(ptr);
        return;
      }
    }
    memory_.free_segment(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    ++uncached_stats_.system_frees;
    uncached_stats_.freed(nbytes);
    uncached_stats_.reserved_bytes -= static_cast<int64_t>(nbytes);
  }

  const int device_;
  const bool caching_;
  CudaMemory memory_;
  BlockPool pool_;
  mutable std::mutex mutex_;  // for the uncached statistics and capture
  MemoryStats uncached_stats_;
  bool uncached_capturing_ = false;
  std::unordered_map<void*, size_t> uncached_kept_;  // released during a capture, by size
  std::vector<void*> uncached_capture_kept_;         // those of the capture under way
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

void begin_capture(int device, const Stream& stream) {
  check_device(device);
  allocators()[device]->begin_capture(stream.handle());
}

std::vector<void*> end_capture(int device) { return allocators()[device]->end_capture(); }

void release_after_replays(int device, const std::vector<void*>& kept, const Stream& replay) {
  allocators()[device]->release_after_replays(kept, replay.handle());
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
