// What a pipeline stage measures in a step, and the scope that measures one
// pass, kept out of the stage runner so that its loop reads as the schedule.
//
//   {
//     TimedPass pass("forward", action, lane, device, step_start, stats);
//     out = chunk.forward(in);
//   }  // a span in the trace; stats.busy_seconds and stats.passes grow
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"
#include "parallel/trace.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {

// What a stage measured in its last step.
struct StageStats {
  double busy_seconds = 0;   // running forward and backward passes
  double idle_fraction = 0;  // 1 - busy / step time
  int peak_in_flight = 0;    // most micro-batches whose activations it held at once (F to B, or to W)
  int64_t bytes_sent = 0;    // activations and gradients passed to neighbours
  // When each pass ran, in seconds from the step's start as the host saw it
  // (on a GPU: from its first to its last queued kernel, not the kernels' time).
  std::vector<PassTime> passes;
};

// A pass of one micro-batch, for its scope: a span in the trace (on a GPU,
// the GPU's time), the stage's busy time and when the pass ran.
class TimedPass {
 public:
  TimedPass(const char* name, const Action& action, int lane, Device device,
            std::chrono::steady_clock::time_point step_start, StageStats& stats)
      : span_(name, "compute", lane, device), action_(action), step_start_(step_start), stats_(stats) {}
  ~TimedPass() {
    const double seconds = watch_.seconds(), end = seconds_since(step_start_);
    stats_.busy_seconds += seconds;
    stats_.passes.push_back({action_, end - seconds, end});
  }
  TimedPass(const TimedPass&) = delete;
  TimedPass& operator=(const TimedPass&) = delete;

 private:
  trace::Span span_;
  Action action_;
  std::chrono::steady_clock::time_point step_start_;
  StageStats& stats_;
  Stopwatch watch_;
};

}  // namespace loom::parallel
