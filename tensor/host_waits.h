// Counts the times the host waited for a device: a device, stream or event
// synchronisation, a copy to host memory (`item()`, `.cpu()`), the caching
// allocators' waits before they give memory back. A training step should
// wait at most where it reads a value (a logged loss, GradScaler's finite
// flag); train_bench reports the waits per step, so that one that crept into
// the loop shows without a profiler.
//
//   const int64_t before = host_waits();
//   step();
//   const int64_t waited = host_waits() - before;  // every thread's waits
//
// The count is process-wide (every thread, every device) and is 0 where
// nothing runs on a GPU: the CPU backend finishes each op before it returns.
//
// While a thread captures a device graph (tensor/device_graph.h), its work is
// recorded, not run: a value it read back would not exist yet. So a host
// wait on that thread is an error naming what waited, raised before it waits.
#pragma once

#include <cstdint>
#include <string>

namespace loom {

// The host waits so far in this process.
int64_t host_waits();

// Called by a backend each time the host is about to wait for its device;
// `what` names the wait for the error a capture raises ("item() or a copy
// from cuda:0 to the host"). Throws loom::Error while this thread captures.
void note_host_wait(const char* what);
// The same count, for the waits of code that cannot throw (an allocator's
// destructor path) and that a capture never reaches.
void count_host_wait() noexcept;

// While it lives, host waits on this thread are errors that say `during`
// (what the thread is doing, e.g. "capturing a CUDA graph on cuda:0").
class HostWaitsForbidden {
 public:
  explicit HostWaitsForbidden(std::string during);
  ~HostWaitsForbidden();
  HostWaitsForbidden(const HostWaitsForbidden&) = delete;
  HostWaitsForbidden& operator=(const HostWaitsForbidden&) = delete;

 private:
  const std::string* previous_;
  std::string during_;
};

}  // namespace loom
