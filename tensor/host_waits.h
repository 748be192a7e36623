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
#pragma once

#include <cstdint>

namespace loom {

// The host waits so far in this process.
int64_t host_waits();

// Called by a backend each time the host is about to wait for its device.
void note_host_wait();

}  // namespace loom
