// CUDA events: markers in a stream's queue, to order work across streams, to
// wait for a point of the queue from the host, and to time device work.
//
//   using namespace loom::cuda;
//   Event start(/*enable_timing=*/true), stop(/*enable_timing=*/true);
//   start.record(current_stream(0));
//   Tensor c = a.matmul(b);
//   stop.record(current_stream(0));
//   stop.synchronize();
//   float ms = start.elapsed_time(stop);
//
//   Event ready;
//   ready.record(copy_stream);
//   ready.wait(compute_stream);   // compute_stream's later work starts after the copy
#pragma once

#include "tensor/cuda/stream.h"

struct CUevent_st;  // cudaEvent_t is CUevent_st*

namespace loom::cuda {

class Event {
 public:
  // Timing costs a little on every record; leave it off for ordering only.
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the current end of `stream`'s queue. An event belongs to the device
  // of the first stream it is recorded on.
  void record(const Stream& stream);
  // Makes `stream`'s later work wait until the recorded point is reached
  // (no host wait). A never-recorded event is already complete.
  void wait(const Stream& stream) const;
  // Blocks the host until the recorded point is reached; reports an
  // out-of-range index that a kernel found before it.
  void synchronize() const;
  // True when the recorded point has been reached (or nothing was recorded).
  bool query() const;
  // Milliseconds from this event to `end`; both recorded with timing on,
  // and `end` complete.
  float elapsed_time(const Event& end) const;

  bool recorded() const { return event_ != nullptr; }
  int device() const { return device_; }
  CUevent_st* handle() const { return event_; }

 private:
  CUevent_st* event_ = nullptr;
  int device_ = -1;
  bool timing_ = false;
};

}  // namespace loom::cuda
