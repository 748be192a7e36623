// Tracing: spans of compute, communication and idle time on named lanes
// (one per device stream, worker thread or pipeline stage), written as
// Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or chrome://tracing.
//
//   trace::enable(true);
//   {
//     trace::Span span("forward", "compute", trace::lane("rank0/compute"));
//     ...
//   }
//   trace::write_chrome_trace("step.json");
//
// Off by default: a Span then costs one relaxed atomic load. Times are host
// wall-clock microseconds. A Span given a GPU device also marks the calling
// thread's queue (stream) at its two ends, and events() reports the GPU's own
// times for it: when the work queued inside the span ran, which on a GPU is
// not when the host queued it. (Call events() after the GPU's work is done,
// or it waits for it.)
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/device_queue.h"

namespace loom::trace {

void enable(bool on);
bool enabled();
// Drops recorded spans (lanes keep their ids).
void clear();

// The id of a lane (a row in the trace viewer), created on first use.
int lane(const std::string& name);
// Every lane's name, indexed by its id.
std::vector<std::string> lane_names();
// The process id to write (e.g. the MPI rank), so that ranks' traces merge.
void set_process(int pid, const std::string& name);

struct Event {
  std::string name;
  std::string category;  // compute, communication, idle, optimizer, ...
  int lane;
  int64_t begin_us;
  int64_t end_us;
};

int64_t now_us();
// A steady-clock time point (e.g. Work::completed_at()) on the same scale.
int64_t to_us(std::chrono::steady_clock::time_point t);
void record(const std::string& name, const std::string& category, int lane, int64_t begin_us, int64_t end_us);
std::vector<Event> events();

// Records [construction, destruction) on `lane` when tracing is on; with a
// GPU `device`, the GPU's time of the work queued meanwhile (see above).
class Span {
 public:
  Span(const char* name, const char* category, int lane, Device device = Device::cpu());
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  const char* category_;
  int lane_;
  int64_t begin_us_ = -1;  // -1: tracing was off
  Device device_;
  DeviceMark gpu_begin_;
};

// Writes all events and lane names, atomically (temporary file, then rename).
void write_chrome_trace(const std::string& path);

}  // namespace loom::trace
