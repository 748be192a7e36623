// Pipeline schedules on an ideal machine, and steps drawn as charts: how a
// bubble arises, before (and beside) timing one.
//
//   SimulatedStep step = simulate_schedule(zero_bubble_h1_schedule(4, 8));
//   std::cout << timeline(step);          // one line per stage, idle time as dots
//   step.bubble_fraction;                 // 3 / 27
#pragma once

#include <string>
#include <vector>

#include "parallel/pipeline/schedule.h"

namespace loom::parallel {

// When a pass ran, from the step's start (simulated units, or seconds).
struct PassTime {
  Action action;
  double start = 0, end = 0;
};

// A schedule run on an ideal machine: passes take `times` (schedule.h), messages take no
// time, and a pass starts as soon as its stage is free and its input (the
// previous chunk's activation, the next chunk's gradient, for W its own I)
// is there. Throws, naming the passes left waiting, if the schedule cannot
// finish (a stage waits for a pass that waits for it, or a backward comes
// before its forward).
struct SimulatedStep {
  double step_time = 0;
  std::vector<double> idle_fraction;  // [stage]
  double bubble_fraction = 0;         // the stages' mean idle fraction
  std::vector<int> peak_in_flight;    // [stage]: most micro-batch chunks held between F and B (or W)
  std::vector<std::vector<PassTime>> passes;  // [stage]: when each of its passes ran
};
// Parts are placed as `placement` says (schedule.h; ZB-V's is V).
SimulatedStep simulate_schedule(const PipelineSchedule& schedule, int chunks = 1, PassTimes times = {},
                                Placement placement = Placement::Loop);
// The same with each part's own pass times (p * chunks of them, in the
// model's order): stages that are not balanced.
SimulatedStep simulate_schedule(const PipelineSchedule& schedule, int chunks, const std::vector<PassTimes>& part_times,
                                Placement placement = Placement::Loop);

// A step as a chart, one line per stage, time running right: each pass is
// its name (F3, I3:1) padded to its length, idle time dots. `width` columns
// span the step; 0 scales it so that the shortest pass is as wide as the
// longest name plus one (a simulated step's passes are all named in full).
//
//   stage 0: F0 F1 ......B0    ...B1
//   stage 1: ...F0 B0    F1 B1    ......
std::string timeline(const std::vector<std::vector<PassTime>>& passes, double step_time, int width = 0);
inline std::string timeline(const SimulatedStep& step) { return timeline(step.passes, step.step_time); }

// The idle fraction of an ideal pipeline with balanced stages, where forward
// and backward passes take equal time: (p - 1) / (v m + p - 1), with v = 1
// for GPipe and 1F1B.
double ideal_bubble_fraction(int stages, int micro_batches, int chunks = 1);
// ZB-H1's on the ideal machine, for m >= p and a W no longer than an I:
// (p - 1)(F + I - W) / (m (F + I + W) + (p - 1)(F + I - W)); with equal
// passes (p - 1) / (3m + p - 1), a third of 1F1B's idle time.
double ideal_zero_bubble_h1_fraction(int stages, int micro_batches, PassTimes times = {});
// The least idle fraction of any one-step schedule whose p stages each run
// `chunks` x m chunk passes of `times`: the last stage cannot start before
// p - 1 forwards, (p - 1) F / (chunks m (F + I + W) + (p - 1) F). With one
// chunk and equal passes (p - 1) / (3m + p - 1), which ZB-H1 meets; ZB-H2
// comes nearer it than ZB-H1 when W is shorter than F.
double one_step_lower_bound(int stages, int micro_batches, int chunks, PassTimes times = {});
// ZB-V's (two chunks): with equal passes (p - 1) / (6m + p - 1). ZB-V meets
// it for p = 2 and 4 (m >= p).
double zero_bubble_v_lower_bound(int stages, int micro_batches, PassTimes times = {});

}  // namespace loom::parallel
