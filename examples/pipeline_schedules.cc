// pipeline_schedules: prints pipeline schedules and what they cost on an
// ideal machine, to see how a bubble arises before timing one
// (parallel/pipeline/schedule.h; docs/pipeline.md).
//
//   bazel run //examples:pipeline_schedules -- --stages 4 --micro-batches 8 --chunks 2
//
// For GPipe, 1F1B and interleaved 1F1B (with --chunks parts a stage): each
// stage's passes in order, then the step's length in passes of a whole
// stage (forward and backward of a micro-batch through one stage take one
// unit each, --backward-cost times that for the backward), each stage's
// idle fraction, the bubble against the theory's (p-1)/(vm+p-1), and the
// most micro-batches' activations a stage holds (interleaved: chunk-sized).
#include <cstdio>
#include <string>

#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "parallel/pipeline/schedule.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  return run_program("pipeline_schedules", [&] {
    Flags flags("Print pipeline schedules and simulate them on an ideal machine");
    int stages = 4, micro_batches = 8, chunks = 2;
    double backward_cost = 1;
    flags.add("--stages", stages, "pipeline stages (devices)", Scope::Job, integer_in(1, 64));
    flags.add("--micro-batches", micro_batches, "micro-batches per batch", Scope::Job, integer_in(1, 1024));
    flags.add("--chunks", chunks, "model chunks per stage of the interleaved schedule", Scope::Job,
              integer_in(1, 16));
    flags.add("--backward-cost", backward_cost, "a backward pass's time in forward passes", Scope::Job,
              number_in(0.01, 100));
    flags.parse(argc, argv);

    for (parallel::ScheduleKind kind : {parallel::ScheduleKind::GPipe, parallel::ScheduleKind::OneFOneB,
                                        parallel::ScheduleKind::Interleaved1F1B}) {
      const int v = kind == parallel::ScheduleKind::Interleaved1F1B ? chunks : 1;
      std::printf("== %s", parallel::schedule_name(kind));
      if (v > 1) std::printf(", %d chunks a stage", v);
      std::printf("\n");
      if (v > 1 && micro_batches % stages != 0) {
        std::printf("skipped: %d micro-batches are not a multiple of the %d stages\n\n", micro_batches, stages);
        continue;
      }
      const parallel::PipelineSchedule schedule = parallel::make_schedule(kind, stages, micro_batches, v);
      std::printf("%s", parallel::to_string(schedule).c_str());
      // A chunk's pass is 1/v of a stage's.
      const parallel::SimulatedStep step = parallel::simulate_schedule(schedule, v, 1.0 / v, backward_cost / v);
      std::printf("step %.2f stage-passes; idle per stage:", step.step_time);
      for (double idle : step.idle_fraction) std::printf(" %.1f%%", 100 * idle);
      std::printf("\nbubble %.1f%% (equal passes in theory: %.1f%%); peak activations per stage:",
                  100 * step.bubble_fraction, 100 * parallel::ideal_bubble_fraction(stages, micro_batches, v));
      for (int peak : step.peak_in_flight) std::printf(" %d", peak);
      std::printf("\n\n");
    }
    return 0;
  });
}
