// Pipelines' idle time measured on the wall clock, with stages that sleep
// through their passes, against each schedule's theory: the single-process
// Pipeline, and DistributedPipeline over rank threads (each rank's busy time
// against the longest rank's step).
// The only pipeline tests that read a clock: Bazel runs this target alone
// (tags "exclusive"), since other tests' threads delay the stages' wake-ups
// and add to the measured bubble (14 binaries on 16 cores added 0.06 to
// ZB-H1's, 2026-11-27).
#include <gtest/gtest.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/pipeline.h"
#include "tests/parallel/sleep_stage.h"

namespace loom {
namespace {

using parallel::ScheduleKind;
using parallel::testing::expect_peaks_as_simulated;
using parallel::testing::run_sleep_pipeline;
using parallel::testing::sleep_pipeline;
using parallel::testing::sum_loss;

// The measured idle fraction of balanced stages against (p - 1) / (m + p - 1).
// Each pass sleeps 40 ms, so thread hand-offs (well under a millisecond) are
// small against the 5-point margin.
TEST(PipelineBubble, MeasuredIdleFractionMatchesTheory) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{3, 3}}) {
    for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
      auto pipe = sleep_pipeline(p, m, kind, 40);
      pipe.train_step(ones({m, 2}), zeros({m}), sum_loss);
      EXPECT_NEAR(pipe.stats().bubble_fraction, parallel::ideal_bubble_fraction(p, m), 0.05)
          << "p=" << p << " m=" << m << (kind == ScheduleKind::GPipe ? " GPipe" : " 1F1B");
    }
  }
}

// Interleaved, two chunks of half a stage's work each (20 ms a pass): the
// idle fraction falls to (p - 1) / (2m + p - 1), and each stage holds the
// activations the ideal machine's simulation says it holds (counted as the
// stage stores and frees them).
TEST(PipelineBubble, InterleavingTwoChunksShrinksTheBubble) {
  const int p = 4, m = 8, v = 2;
  auto pipe = sleep_pipeline(p, m, ScheduleKind::Interleaved1F1B, 20, v);
  pipe.train_step(ones({m, 2}), zeros({m}), sum_loss);
  EXPECT_NEAR(pipe.stats().bubble_fraction, parallel::ideal_bubble_fraction(p, m, v), 0.05);
  EXPECT_LT(pipe.stats().bubble_fraction, parallel::ideal_bubble_fraction(p, m) - 0.05) << "no better than 1F1B";
  expect_peaks_as_simulated(pipe.stats(),
                            parallel::simulate_schedule(parallel::interleaved_one_f_one_b_schedule(p, v, m), v));
}

// ZB-H1 with F, I and W of 40 ms each: the stages idle (p - 1) / (3m + p - 1)
// of the step, against 1F1B's (p - 1) / (m + p - 1) for the same stages, and
// hold what the simulation says (F to W). With 20 ms passes, thread wake-ups
// on a loaded machine (14 test binaries on 16 cores) added 0.06 to the bubble.
TEST(PipelineBubble, ZeroBubbleH1FillsTheWaitsWithWeightGradients) {
  const int p = 4, m = 8;
  auto zb = sleep_pipeline(p, m, ScheduleKind::ZeroBubbleH1, 40, 1, 40);
  zb.train_step(ones({m, 2}), zeros({m}), sum_loss);
  auto one_f_one_b = sleep_pipeline(p, m, ScheduleKind::OneFOneB, 40, 1, 40);
  one_f_one_b.train_step(ones({m, 2}), zeros({m}), sum_loss);
  EXPECT_NEAR(zb.stats().bubble_fraction, parallel::ideal_zero_bubble_h1_fraction(p, m), 0.05);
  EXPECT_NEAR(one_f_one_b.stats().bubble_fraction, parallel::ideal_bubble_fraction(p, m), 0.05);
  EXPECT_LT(zb.stats().bubble_fraction, one_f_one_b.stats().bubble_fraction - 0.1);
  std::printf("measured bubble: zb-h1 %.3f (theory %.3f), 1f1b %.3f (theory %.3f)\n", zb.stats().bubble_fraction,
              parallel::ideal_zero_bubble_h1_fraction(p, m), one_f_one_b.stats().bubble_fraction,
              parallel::ideal_bubble_fraction(p, m));
  expect_peaks_as_simulated(zb.stats(), parallel::simulate_schedule(parallel::zero_bubble_h1_schedule(p, m)));
}

// ZB-V with F, I and W of 20 ms each (a chunk pass): the stages
// idle only while the first micro-batch comes down, (p - 1) / (6m + p - 1)
// of the step, half of ZB-H1's (p - 1) / (3m + p - 1) with equal passes,
// and hold what the simulation says.
TEST(PipelineBubble, ZeroBubbleVIdlesOnlyWhileTheFirstMicroBatchComesDown) {
  const int p = 4, m = 8;
  auto zbv = sleep_pipeline(p, m, ScheduleKind::ZeroBubbleV, 20, 2, 20);
  zbv.train_step(ones({m, 2}), zeros({m}), sum_loss);
  const double theory = (p - 1.0) / (6.0 * m + p - 1);
  EXPECT_NEAR(zbv.stats().bubble_fraction, theory, 0.04);
  EXPECT_LT(zbv.stats().bubble_fraction, parallel::ideal_zero_bubble_h1_fraction(p, m));
  std::printf("measured bubble: zb-v %.3f (theory %.3f)\n", zbv.stats().bubble_fraction, theory);
  expect_peaks_as_simulated(zbv.stats(), parallel::simulate_schedule(parallel::zero_bubble_v_schedule(p, m), 2,
                                                                     parallel::PassTimes{}, parallel::Placement::V));
}

// ---- DistributedPipeline over rank threads ----

// One step of p rank threads of sleeping stages: each rank's stats, and the
// ranks' mean idle fraction, each rank's busy time against the longest
// rank's step.
struct RankThreadsStep {
  std::vector<parallel::StageStats> stats;
  double bubble = 0;
};
RankThreadsStep rank_threads_step(int p, int m, ScheduleKind kind, int ms, int chunks = 1, int weight_ms = 0) {
  double step = 0;
  RankThreadsStep r{run_sleep_pipeline(p, m, kind, ms, &step, chunks, weight_ms)};
  for (const parallel::StageStats& s : r.stats) r.bubble += (1 - s.busy_seconds / step) / p;
  return r;
}

// Each rank's busy time against the longest rank's step: the idle fraction
// of balanced stages is (p - 1) / (m + p - 1). Each pass sleeps 40 ms, so
// message hand-offs (well under a millisecond) are small against 5 points.
TEST(DistributedPipelineBubble, MeasuredIdleFractionMatchesTheory) {
  for (auto [p, m] : {std::pair{4, 8}, std::pair{3, 3}}) {
    for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
      EXPECT_NEAR(rank_threads_step(p, m, kind, 40).bubble, parallel::ideal_bubble_fraction(p, m), 0.05)
          << "p=" << p << " m=" << m << (kind == ScheduleKind::GPipe ? " GPipe" : " 1F1B");
    }
  }
}

// Interleaved over ranks, two chunks of half a stage's work each (20 ms a
// pass): the idle fraction falls to (p - 1) / (2m + p - 1), and each rank
// holds the activations the ideal machine's simulation says it holds.
TEST(DistributedPipelineBubble, InterleavingTwoChunksShrinksTheBubble) {
  const int p = 4, m = 8, v = 2;
  const auto [stats, bubble] = rank_threads_step(p, m, ScheduleKind::Interleaved1F1B, 20, v);
  EXPECT_NEAR(bubble, parallel::ideal_bubble_fraction(p, m, v), 0.05);
  EXPECT_LT(bubble, parallel::ideal_bubble_fraction(p, m) - 0.05) << "no better than 1F1B";
  const parallel::SimulatedStep simulated =
      parallel::simulate_schedule(parallel::interleaved_one_f_one_b_schedule(p, v, m), v);
  for (int s = 0; s < p; ++s) EXPECT_EQ(stats[s].peak_in_flight, simulated.peak_in_flight[s]) << "rank " << s;
}

// ZB-H1 over ranks, F, I and W of 20 ms each: (p - 1) / (3m + p - 1) idle,
// against 1F1B's (p - 1) / (m + p - 1) with the same stages.
TEST(DistributedPipelineBubble, ZeroBubbleH1FillsTheWaitsWithWeightGradients) {
  const int p = 4, m = 8;
  const auto [zb_stats, zb] = rank_threads_step(p, m, ScheduleKind::ZeroBubbleH1, 20, 1, 20);
  const auto [one_f_one_b_stats, one_f_one_b] = rank_threads_step(p, m, ScheduleKind::OneFOneB, 20, 1, 20);
  EXPECT_NEAR(zb, parallel::ideal_zero_bubble_h1_fraction(p, m), 0.05);
  EXPECT_LT(zb, one_f_one_b - 0.1);
  const parallel::SimulatedStep simulated = parallel::simulate_schedule(parallel::zero_bubble_h1_schedule(p, m));
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(zb_stats[s].peak_in_flight, simulated.peak_in_flight[s]) << "rank " << s;
    EXPECT_EQ(zb_stats[s].bytes_sent, one_f_one_b_stats[s].bytes_sent) << "rank " << s << ": the same messages";
  }
}

// ZB-V over ranks, F, I and W of 20 ms each (a chunk pass): idle
// only while the first micro-batch comes down, (p - 1) / (6m + p - 1); each
// rank holds what the simulation says; the last rank's turn is not sent: of
// its [1, 2] float32 tensors, the end ranks send an activation and a gradient
// a micro-batch, the middle ones two of each.
TEST(DistributedPipelineBubble, ZeroBubbleVIdlesOnlyWhileTheFirstMicroBatchComesDown) {
  const int p = 4, m = 8;
  const auto [stats, bubble] = rank_threads_step(p, m, ScheduleKind::ZeroBubbleV, 20, 2, 20);
  std::printf("measured bubble: zb-v %.3f (theory %.3f)\n", bubble, parallel::zero_bubble_v_lower_bound(p, m));
  EXPECT_NEAR(bubble, parallel::zero_bubble_v_lower_bound(p, m), 0.04);
  EXPECT_LT(bubble, parallel::ideal_zero_bubble_h1_fraction(p, m));
  const parallel::SimulatedStep simulated = parallel::simulate_schedule(parallel::zero_bubble_v_schedule(p, m), 2,
                                                                        parallel::PassTimes{}, parallel::Placement::V);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(stats[s].peak_in_flight, simulated.peak_in_flight[s]) << "rank " << s;
    EXPECT_EQ(stats[s].bytes_sent, (s == 0 || s == p - 1 ? 2 : 4) * m * 2 * 4) << "rank " << s;
  }
}

}  // namespace
}  // namespace loom
