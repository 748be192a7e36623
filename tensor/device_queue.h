// Device-side order between threads that work on one device, each on a
// queue of its own (a CUDA stream), so that their work can overlap — how
// DataParallel replicas and pipeline stages that share a GPU run side by
// side. On the CPU all of this does nothing: work there is done when its call
// returns, so every thread's results are ready when it hands them over.
//
//   DeviceQueue stage_queue(device);                   // one per worker, kept
//   DeviceMark inputs_ready = DeviceMark::here(device);   // on the handing thread
//   ... on the worker:
//   DeviceQueue::Scope on_own(stage_queue);            // its work goes on its queue
//   inputs_ready.wait_here();                          // after the inputs were made
//   used_here(input);                                  // input's memory came from another queue
//   Tensor y = stage->forward(input);
//   DeviceMark y_ready = DeviceMark::here(device);     // hand y over with this mark
#pragma once

#include <memory>

#include "tensor/backend.h"

namespace loom {

class DeviceQueue {
 public:
  explicit DeviceQueue(Device device);
  Device device() const { return device_; }

  // For its lifetime, the calling thread's work on the device goes on the queue.
  class Scope {
   public:
    explicit Scope(const DeviceQueue& queue);
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::shared_ptr<Backend::QueueObject> guard_;
  };

 private:
  Device device_;
  std::shared_ptr<Backend::QueueObject> queue_;
};

// A point in the calling thread's queue on a device.
class DeviceMark {
 public:
  DeviceMark() = default;  // already reached
  static DeviceMark here(Device device);
  // One that seconds_until() can measure from (for GPU timings; tracing).
  static DeviceMark timed(Device device);
  // The calling thread's queue on the device waits until the mark is reached.
  void wait_here() const;
  // The device's seconds from this timed mark to a later one, waiting (host)
  // for the later one; 0 on the CPU.
  double seconds_until(const DeviceMark& later) const;
  bool on_device() const { return mark_ != nullptr; }

 private:
  Device device_;
  std::shared_ptr<Backend::QueueObject> mark_;
};

// `t`, made on another queue, is used by work now queued on the calling
// thread's: its memory must not be reused before that work is done.
void used_here(const Tensor& t);

}  // namespace loom
