// Pipeline schedules as data: for each stage, the ordered list of forward
// and backward passes of micro-batches it runs. Keeping them as data lets a
// schedule be printed, tested and analysed apart from the code that runs it.
//
//   PipelineSchedule s = one_f_one_b_schedule(/*stages=*/4, /*micro_batches=*/8);
//   std::cout << to_string(s);
//   // stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7
//   // ...
//   // stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7
#pragma once

#include <string>
#include <vector>

namespace loom::parallel {

enum class Pass { Forward, Backward };

struct Action {
  Pass pass;
  int micro_batch;
  bool operator==(const Action& o) const { return pass == o.pass && micro_batch == o.micro_batch; }
};

using PipelineSchedule = std::vector<std::vector<Action>>;  // [stage] -> actions in order

enum class ScheduleKind { GPipe, OneFOneB };

// GPipe (Huang et al. 2019): every stage runs all forwards, then all
// backwards (in micro-batch order, as PyTorch's ScheduleGPipe). Each stage
// holds the activations of all m micro-batches at once.
PipelineSchedule gpipe_schedule(int stages, int micro_batches);

// 1F1B / PipeDream-Flush (Narayanan et al. 2021): stage s first runs
// p - s - 1 forwards (warm-up), then alternates one forward and one backward,
// then finishes the remaining backwards. It has GPipe's bubble but holds at
// most p micro-batches' activations.
PipelineSchedule one_f_one_b_schedule(int stages, int micro_batches);

PipelineSchedule make_schedule(ScheduleKind kind, int stages, int micro_batches);

// "stage 0: F0 F1 ... B0 ...", one line per stage.
std::string to_string(const PipelineSchedule& schedule);

// The idle fraction of an ideal pipeline with balanced stages, where forward
// and backward passes take equal time: (p - 1) / (m + p - 1).
double ideal_bubble_fraction(int stages, int micro_batches);

}  // namespace loom::parallel
