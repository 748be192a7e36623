// pipeline_schedules: prints pipeline schedules and what they cost on an
// ideal machine, to see how a bubble arises before timing one
// (parallel/pipeline/schedule.h; docs/pipeline.md).
//
//   bazel run //examples:pipeline_schedules -- --stages 4 --micro-batches 8 --chunks 2
//
// For GPipe, 1F1B, interleaved 1F1B (with --chunks parts a stage), ZB-H1
// (each backward split into the input's gradient I and the weights' W),
// ZB-H2 (forwards run ahead) and ZB-V (two chunks a stage in a V; both
// built for the passes' times): each
// stage's passes in order, then the step's length in passes of a
// whole stage (a forward of a micro-batch through one stage takes one unit,
// its backward --backward-cost units, of which W takes --weight-share),
// the step drawn (passes where they run, idle time as dots; --no-timeline
// leaves it out), each stage's idle fraction, the bubble against the theory's
// ((p-1)/(vm+p-1); ZB-H1's in schedule.h; for ZB-H2 and ZB-V the least any
// schedule of their chunks can idle, simulator.h), and the most
// micro-batches' activations a stage holds (interleaved and ZB-V:
// chunk-sized; the zero-bubble ones: until W).
#include <cstdio>
#include <string>

#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  return run_program("pipeline_schedules", [&] {
    Flags flags("Print pipeline schedules and simulate them on an ideal machine");
    int stages = 4, micro_batches = 8, chunks = 2;
    double backward_cost = 1, weight_share = 0.5;
    bool no_timeline = false;
    std::string schedules = "gpipe,1f1b,interleaved,zb-h1,zb-h2,zb-v";
    flags.add("--stages", stages, "pipeline stages (devices)", Scope::Job, integer_in(1, 64));
    flags.add("--micro-batches", micro_batches, "micro-batches per batch", Scope::Job, integer_in(1, 1024));
    flags.add("--chunks", chunks, "model chunks per stage of the interleaved schedule", Scope::Job,
              integer_in(1, 16));
    flags.add("--backward-cost", backward_cost, "a backward pass's time in forward passes", Scope::Job,
              number_in(0.01, 100));
    flags.add("--weight-share", weight_share, "the share of a backward that is the weights' gradients (W)",
              Scope::Job, number_in(0, 1));
    flags.add_switch("--no-timeline", no_timeline, "do not draw the simulated steps", Scope::Job);
    flags.add("--schedules", schedules, "comma-separated subset to print", Scope::Job,
              list_of({"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"}));
    flags.parse(argc, argv);

    for (parallel::ScheduleKind kind : {parallel::ScheduleKind::GPipe, parallel::ScheduleKind::OneFOneB,
                                        parallel::ScheduleKind::Interleaved1F1B,
                                        parallel::ScheduleKind::ZeroBubbleH1, parallel::ScheduleKind::ZeroBubbleH2,
                                        parallel::ScheduleKind::ZeroBubbleV}) {
      if (("," + schedules + ",").find("," + std::string(parallel::schedule_name(kind)) + ",") == std::string::npos)
        continue;
      const bool zb_v = kind == parallel::ScheduleKind::ZeroBubbleV, zb_h2 = kind == parallel::ScheduleKind::ZeroBubbleH2;
      const int v = parallel::chunks_for(kind, chunks);
      std::printf("== %s", parallel::schedule_name(kind));
      if (v > 1) std::printf(", %d chunks a stage%s", v, zb_v ? " in a V" : "");
      std::printf("\n");
      if (kind == parallel::ScheduleKind::Interleaved1F1B && v > 1 && micro_batches % stages != 0) {
        std::printf("skipped: %d micro-batches are not a multiple of the %d stages\n\n", micro_batches, stages);
        continue;
      }
      // A chunk's pass is 1/v of a stage's.
      const parallel::PassTimes times{.forward = 1.0 / v,
                                      .backward_input = (1 - weight_share) * backward_cost / v,
                                      .backward_weight = weight_share * backward_cost / v};
      const parallel::PipelineSchedule schedule = parallel::make_schedule(
          kind, stages, micro_batches, v,
          parallel::built_for_pass_times(kind) ? std::vector<parallel::PassTimes>(stages * v, times)
                                               : std::vector<parallel::PassTimes>{});
      std::printf("%s", parallel::to_string(schedule).c_str());
      const parallel::SimulatedStep step =
          parallel::simulate_schedule(schedule, v, times, parallel::placement_of(kind));
      if (!no_timeline) std::printf("on the ideal machine:\n%s", parallel::timeline(step).c_str());
      std::printf("step %.2f stage-passes; idle per stage:", step.step_time);
      for (double idle : step.idle_fraction) std::printf(" %.1f%%", 100 * idle);
      const double theory = kind == parallel::ScheduleKind::ZeroBubbleH1
                                ? parallel::ideal_zero_bubble_h1_fraction(stages, micro_batches, times)
                            : zb_v || zb_h2 ? parallel::one_step_lower_bound(stages, micro_batches, v, times)
                                            : parallel::ideal_bubble_fraction(stages, micro_batches, v);
      std::printf("\nbubble %.1f%% (%s: %.1f%%); peak activations per stage%s:", 100 * step.bubble_fraction,
                  zb_v || zb_h2                                   ? "these passes, at least"
                  : kind == parallel::ScheduleKind::ZeroBubbleH1 ? "these passes in theory"
                                                                  : "equal passes in theory",
                  100 * theory, zb_v ? " (chunks, each half a stage's)" : "");
      for (int peak : step.peak_in_flight) std::printf(" %d", peak);
      std::printf("\n\n");
    }
    return 0;
  });
}
