// Pipeline schedules and the single-process pipeline: schedule orders,
// equivalence with single-device training, measured activation memory,
// failure handling; and layer-split model parallelism. The bubbles measured
// on the wall clock: pipeline_bubble_test.cc.
#include "parallel/pipeline/layer_split.h"
#include "parallel/pipeline/pipeline.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <sstream>
#include <tuple>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tests/parallel/equivalence.h"
#include "tests/parallel/pipeline_checks.h"
#include "tests/parallel/sleep_stage.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using parallel::ScheduleKind;
using parallel::testing::max_param_difference;
using parallel::testing::PipelineCase;
using parallel::testing::expect_peaks_as_simulated;
using parallel::testing::sleep_pipeline;
using parallel::testing::sum_loss;
namespace F = nn::functional;

TEST(Schedule, GPipeOrderForFourStagesEightMicroBatches) {
  const std::string all_forward_then_backward = " F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7\n";
  EXPECT_EQ(parallel::to_string(parallel::gpipe_schedule(4, 8)),
            "stage 0:" + all_forward_then_backward + "stage 1:" + all_forward_then_backward +
                "stage 2:" + all_forward_then_backward + "stage 3:" + all_forward_then_backward);
}

TEST(Schedule, OneFOneBOrderForFourStagesEightMicroBatches) {
  // Warm-up of p - s - 1 forwards, alternate, then cool down (Narayanan et al. 2021, Fig. 4).
  EXPECT_EQ(parallel::to_string(parallel::one_f_one_b_schedule(4, 8)),
            "stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7\n"
            "stage 1: F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7\n"
            "stage 2: F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7\n"
            "stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7\n");
  // Fewer micro-batches than stages: the warm-up is cut short.
  EXPECT_EQ(parallel::to_string(parallel::one_f_one_b_schedule(3, 1)),
            "stage 0: F0 B0\nstage 1: F0 B0\nstage 2: F0 B0\n");
  EXPECT_THROW_MSG(parallel::gpipe_schedule(0, 4), "gpipe_schedule: need at least one stage");
}

// Interleaved 1F1B, 2 stages x 2 chunks, 4 micro-batches, written out by hand
// from Megatron-LM's rules: forwards take micro-batches in groups of p = 2
// through chunk 0, then the same group through chunk 1; backwards take the
// chunks in reverse; stage s warms up with 2 (p - s - 1) + (v - 1) p forwards.
TEST(Schedule, InterleavedOrderForTwoStagesTwoChunksFourMicroBatches) {
  EXPECT_EQ(parallel::to_string(parallel::interleaved_one_f_one_b_schedule(2, 2, 4)),
            "stage 0: F0:0 F1:0 F0:1 F1:1 F2:0 B0:1 F3:0 B1:1 F2:1 B0:0 F3:1 B1:0 B2:1 B3:1 B2:0 B3:0\n"
            "stage 1: F0:0 F1:0 F0:1 B0:1 F1:1 B1:1 F2:0 B0:0 F3:0 B1:0 F2:1 B2:1 F3:1 B3:1 B2:0 B3:0\n");
  EXPECT_EQ(parallel::interleaved_one_f_one_b_schedule(3, 1, 5), parallel::one_f_one_b_schedule(3, 5));
  EXPECT_THROW_MSG(parallel::interleaved_one_f_one_b_schedule(2, 2, 3),
                   "interleaved_one_f_one_b_schedule: 3 micro-batches are not a multiple of the 2 stages");
  EXPECT_THROW_MSG(parallel::make_schedule(ScheduleKind::OneFOneB, 2, 4, 2),
                   "make_schedule: the 1f1b schedule runs one chunk per stage, got 2");
}

// Every schedule loom makes runs to its end on the ideal machine, with each
// stage running each (chunk, micro-batch) forward and backward once, and the
// bubble the theory gives: (p - 1) / (v m + p - 1).
TEST(Schedule, EveryScheduleFinishesWithTheTheoreticalBubble) {
  for (int p = 1; p <= 5; ++p)
    for (int m : {1, 2, 3, 4, 6, 8, 12, 16})
      for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B})
        for (int v : {1, 2, 3, 4}) {
          if (v > 1 && (kind != ScheduleKind::Interleaved1F1B || m % p != 0)) continue;
          const std::string what = std::string(parallel::schedule_name(kind)) + " p=" + std::to_string(p) +
                                   " v=" + std::to_string(v) + " m=" + std::to_string(m);
          const parallel::PipelineSchedule schedule = parallel::make_schedule(kind, p, m, v);
          for (const auto& actions : schedule) {
            std::map<std::tuple<int, int, int>, int> seen;
            for (const parallel::Action& a : actions) ++seen[{static_cast<int>(a.pass), a.chunk, a.micro_batch}];
            EXPECT_EQ(seen.size(), static_cast<size_t>(2 * v * m)) << what;
            for (const auto& [pass, count] : seen) EXPECT_EQ(count, 1) << what;
          }
          const parallel::SimulatedStep step = parallel::simulate_schedule(schedule, v);
          EXPECT_NEAR(step.bubble_fraction, parallel::ideal_bubble_fraction(p, m, v), 1e-12) << what;
          EXPECT_DOUBLE_EQ(step.step_time, 3.0 * (v * m + p - 1)) << what;  // F 1, B 2
        }
}

// Activation memory on the ideal machine: 1F1B holds at most p - s micro-batches
// on stage s, interleaving (a chunk holds 1/v of a stage's activations) at
// most its warm-up plus one chunk passes, GPipe all m.
TEST(Schedule, SimulatedPeakActivations) {
  const int p = 4, m = 8, v = 2;
  const auto one_f_one_b = parallel::simulate_schedule(parallel::one_f_one_b_schedule(p, m));
  const auto gpipe = parallel::simulate_schedule(parallel::gpipe_schedule(p, m));
  const auto interleaved = parallel::simulate_schedule(parallel::interleaved_one_f_one_b_schedule(p, v, m), v);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(one_f_one_b.peak_in_flight[s], p - s) << "stage " << s;
    EXPECT_EQ(gpipe.peak_in_flight[s], m) << "stage " << s;
    EXPECT_EQ(interleaved.peak_in_flight[s], 2 * (p - s - 1) + (v - 1) * p + 1) << "stage " << s;
  }
}

TEST(Schedule, SimulationNamesThePassesADeadlockedScheduleWaitsIn) {
  // Stage 0 waits for micro-batch 0's gradient before it sends micro-batch
  // 1's activation, which stage 1 needs before it computes that gradient.
  const parallel::PipelineSchedule deadlocked = {
      {{parallel::Pass::Forward, 0}, {parallel::Pass::Backward, 0}, {parallel::Pass::Forward, 1}, {parallel::Pass::Backward, 1}},
      {{parallel::Pass::Forward, 0}, {parallel::Pass::Forward, 1}, {parallel::Pass::Backward, 0}, {parallel::Pass::Backward, 1}}};
  EXPECT_THROW_MSG(parallel::simulate_schedule(deadlocked),
                   "simulate_schedule: the schedule cannot finish, waiting: stage 0 at B0; stage 1 at F1;");
  EXPECT_THROW_MSG(parallel::simulate_schedule({{{parallel::Pass::Backward, 0}, {parallel::Pass::Forward, 0}}}),
                   "waiting: stage 0 at B0;");
}

// ZB-H1, 2 stages, 4 micro-batches, written out by hand from its rule: 1F1B's
// forwards and input gradients (I), stage s putting off a W until more than
// s micro-batches wait for theirs; the last stage's W3 comes at the very end.
TEST(Schedule, ZeroBubbleH1OrderForTwoStagesFourMicroBatches) {
  EXPECT_EQ(parallel::to_string(parallel::zero_bubble_h1_schedule(2, 4)),
            "stage 0: F0 F1 I0 W0 F2 I1 W1 F3 I2 W2 I3 W3\n"
            "stage 1: F0 I0 F1 I1 W0 F2 I2 W1 F3 I3 W2 W3\n");
  EXPECT_EQ(parallel::make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4), parallel::zero_bubble_h1_schedule(2, 4));
  EXPECT_EQ(parallel::schedule_kind("zb-h1"), ScheduleKind::ZeroBubbleH1);
  EXPECT_THROW_MSG(parallel::schedule_kind("zb-h3"), "unknown pipeline schedule 'zb-h3'");
  EXPECT_THROW_MSG(parallel::make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4, 2),
                   "the zb-h1 schedule runs one chunk per stage, got 2");
}

// On the ideal machine ZB-H1 runs every pass once, sends the same messages
// in the same order as 1F1B (its F and I are 1F1B's F and B), holds at most
// p micro-batches between F and W, and idles what the theory says: a third
// of 1F1B's time with equal passes, whatever W's share as long as W is no
// longer than I.
TEST(Schedule, ZeroBubbleH1FinishesWithTheTheoreticalBubble) {
  for (int p = 1; p <= 5; ++p)
    for (int m : {1, 2, 3, 4, 5, 6, 8, 12, 16}) {
      const std::string what = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      const parallel::PipelineSchedule zb = parallel::zero_bubble_h1_schedule(p, m);
      const parallel::PipelineSchedule one_f_one_b = parallel::one_f_one_b_schedule(p, m);
      for (int s = 0; s < p; ++s) {
        std::map<std::pair<int, int>, int> seen;
        std::vector<parallel::Action> messages;  // F and I, with I written as 1F1B's B
        for (const parallel::Action& a : zb[s]) {
          ++seen[{static_cast<int>(a.pass), a.micro_batch}];
          if (a.pass == parallel::Pass::Forward) messages.push_back(a);
          if (a.pass == parallel::Pass::BackwardInput) messages.push_back({parallel::Pass::Backward, a.micro_batch});
        }
        EXPECT_EQ(seen.size(), static_cast<size_t>(3 * m)) << what;
        for (const auto& [pass, count] : seen) EXPECT_EQ(count, 1) << what;
        EXPECT_EQ(messages, one_f_one_b[s]) << what << " stage " << s;
      }
      for (parallel::PassTimes times : {parallel::PassTimes{}, parallel::PassTimes{1, 0.5, 0.5},
                                        parallel::PassTimes{1, 1.2, 0.8}, parallel::PassTimes{2, 1, 1}}) {
        const parallel::SimulatedStep step = parallel::simulate_schedule(zb, 1, times);
        if (m < p) continue;  // it finishes (simulate_schedule would throw), with a longer bubble
        EXPECT_NEAR(step.bubble_fraction, parallel::ideal_zero_bubble_h1_fraction(p, m, times), 1e-12)
            << what << " F " << times.forward << " I " << times.backward_input << " W " << times.backward_weight;
        for (int s = 0; s < p; ++s) EXPECT_LE(step.peak_in_flight[s], p) << what;
      }
      const double one_f_one_b_idle = 3.0 * (p - 1), zb_idle = p - 1.0;  // in passes, F = I = W = 1, B = 2
      if (m >= p) {
        EXPECT_DOUBLE_EQ(parallel::simulate_schedule(zb).step_time - 3 * m, zb_idle) << what;
      }
      EXPECT_DOUBLE_EQ(parallel::simulate_schedule(one_f_one_b).step_time - 3 * m, one_f_one_b_idle) << what;
    }
}

// 1F1B, 2 stages, 2 micro-batches, a backward twice a forward, worked out by
// hand: stage 1's B0 ends at 4, so stage 0 waits 2 units for it, then 1 for
// B1 (stage 1 runs F1 first); stage 1 starts after stage 0's F0 and ends 2
// units before it. One unit is 3 columns (the names' 2 and a blank).
TEST(Schedule, TimelineDrawsTheSimulatedStep) {
  const parallel::SimulatedStep step = parallel::simulate_schedule(parallel::one_f_one_b_schedule(2, 2));
  EXPECT_EQ(parallel::timeline(step),
            "stage 0: F0 F1 ......B0    ...B1\n"
            "stage 1: ...F0 B0    F1 B1    ......\n");
  ASSERT_EQ(step.passes[0].size(), 4u);
  EXPECT_EQ(step.passes[0][2].action, (parallel::Action{parallel::Pass::Backward, 0}));
  EXPECT_DOUBLE_EQ(step.passes[0][2].start, 4);
  EXPECT_DOUBLE_EQ(step.passes[0][2].end, 6);
}

// Parts in a loop (interleaved) and in a V (ZB-V): where each part runs, and back.
TEST(Placement, LoopAndVPlaceEveryPartOnce) {
  using parallel::Placement;
  const int p = 3;
  std::vector<std::pair<int, int>> loop, v;  // (stage, chunk) of parts 0..5
  for (int part = 0; part < 2 * p; ++part) {
    for (Placement placement : {Placement::Loop, Placement::V}) {
      const parallel::StageChunk where = parallel::place_part(part, p, 2, placement);
      (placement == Placement::Loop ? loop : v).push_back({where.stage, where.chunk});
      EXPECT_EQ(parallel::part_at(where, p, placement), part);
    }
  }
  EXPECT_EQ(loop, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}}));
  EXPECT_EQ(v, (std::vector<std::pair<int, int>>{{0, 0}, {1, 0}, {2, 0}, {2, 1}, {1, 1}, {0, 1}}));
  std::vector<nn::ModulePtr> parts;
  for (int i = 0; i < 2 * p; ++i) parts.push_back(nn::Linear(1, 1).ptr());
  EXPECT_EQ(parallel::stage_chunks(parts, 2, p, Placement::V), (std::vector<nn::ModulePtr>{parts[2], parts[3]}));
  EXPECT_EQ(parallel::stage_chunks(parts, 2, p), (std::vector<nn::ModulePtr>{parts[2], parts[5]}));
  EXPECT_EQ(parallel::stage_chunks(parts, 0, p, Placement::V), (std::vector<nn::ModulePtr>{parts[0], parts[5]}));
  EXPECT_THROW_MSG(parallel::place_part(6, p, 3, Placement::V), "place_part: part 6 of 3 stages x 3 chunks in a V");
  EXPECT_THROW_MSG(parallel::make_schedule(ScheduleKind::ZeroBubbleV, 2, 4), "the zb-v schedule runs two chunks");
  EXPECT_EQ(parallel::schedule_kind("zb-v"), ScheduleKind::ZeroBubbleV);
  EXPECT_EQ(parallel::placement_of(ScheduleKind::ZeroBubbleV), Placement::V);
  EXPECT_EQ(parallel::placement_of(ScheduleKind::Interleaved1F1B), Placement::Loop);
  EXPECT_EQ(parallel::chunks_for(ScheduleKind::ZeroBubbleV, 3), 2);
  EXPECT_EQ(parallel::chunks_for(ScheduleKind::Interleaved1F1B, 3), 3);
  EXPECT_EQ(parallel::chunks_for(ScheduleKind::ZeroBubbleH1, 3), 1);
  EXPECT_THROW_MSG(parallel::make_schedule(ScheduleKind::ZeroBubbleH1, 2, 4, 2), "the zb-h1 schedule runs one chunk");
}

// ZB-V as built for equal passes, checked on the ideal machine: every pass
// of both chunks once, in order (F, then I, then W), the schedule finishes,
// a stage holds at most 2p chunk activations (1F1B's first stage: p whole
// stages), and no stage idles less than the (p - 1) forwards its first
// input takes, which it meets exactly for p = 2 and 4 (m >= p); it always
// idles less than ZB-H1 with the same two chunks as one stage.
TEST(Schedule, ZeroBubbleVFinishesNearItsLowerBound) {
  for (int p = 1; p <= 6; ++p)
    for (int m = 1; m <= 16; ++m) {
      const std::string what = "p=" + std::to_string(p) + " m=" + std::to_string(m);
      const parallel::PipelineSchedule zbv = parallel::zero_bubble_v_schedule(p, m);
      ASSERT_EQ(zbv.size(), static_cast<size_t>(p));
      for (int s = 0; s < p; ++s) {
        std::map<std::pair<int, int>, std::string> passes;  // (chunk, micro-batch) -> its passes in order
        for (const parallel::Action& a : zbv[s]) passes[{a.chunk, a.micro_batch}] += parallel::to_string(a)[0];
        ASSERT_EQ(passes.size(), static_cast<size_t>(2 * m)) << what << " stage " << s;
        for (const auto& [key, order] : passes) EXPECT_EQ(order, "FIW") << what << " stage " << s;
      }
      const parallel::SimulatedStep step = parallel::simulate_schedule(zbv, 2, parallel::PassTimes{}, parallel::Placement::V);
      for (int s = 0; s < p; ++s) EXPECT_LE(step.peak_in_flight[s], 2 * p) << what;
      const double lower_bound = (p - 1.0) / (6.0 * m + p - 1);  // idle (p - 1) F of a step 6m F + idle
      EXPECT_DOUBLE_EQ(parallel::zero_bubble_v_lower_bound(p, m), lower_bound) << what;
      EXPECT_GE(step.bubble_fraction, lower_bound - 1e-12) << what;
      if ((p == 2 || p == 4) && m >= p) {
        EXPECT_NEAR(step.bubble_fraction, lower_bound, 1e-12) << what;
      }
      if (p > 1 && m >= p) {
        EXPECT_LT(step.bubble_fraction, parallel::ideal_zero_bubble_h1_fraction(p, m)) << what;
      }
    }
}

// Built for other pass times, the schedule still holds, and on the ideal
// machine with those times it beats ZB-H1 with the chunks as one stage.
TEST(Schedule, ZeroBubbleVIsBuiltForThePassTimesGiven) {
  const int p = 4, m = 8;
  for (parallel::PassTimes times : {parallel::PassTimes{1, 2, 1}, parallel::PassTimes{2, 1, 0.5},
                                    parallel::PassTimes{1, 1, 2}}) {
    const parallel::SimulatedStep step = parallel::simulate_schedule(parallel::zero_bubble_v_schedule(p, m, times), 2,
                                                                     times, parallel::Placement::V);
    const parallel::PassTimes whole_stage{2 * times.forward, 2 * times.backward_input, 2 * times.backward_weight};
    const parallel::SimulatedStep h1 =
        parallel::simulate_schedule(parallel::zero_bubble_h1_schedule(p, m), 1, whole_stage);
    EXPECT_LT(step.step_time, h1.step_time) << "F " << times.forward << " I " << times.backward_input;
    EXPECT_GE(step.bubble_fraction, parallel::zero_bubble_v_lower_bound(p, m, times) - 1e-12);
    for (int s = 0; s < p; ++s) EXPECT_LE(step.peak_in_flight[s], 2 * p);
  }
  EXPECT_THROW_MSG(parallel::zero_bubble_v_schedule(2, 2, {1, -1, 1}), "pass times must be finite and not negative");
}

// Parts of unequal cost: the V scheduled for their times finishes sooner on
// the ideal machine with those times than the V scheduled for equal passes,
// and still holds at most 2p chunk activations a stage.
TEST(Schedule, ZeroBubbleVIsBuiltForEachPartsTimes) {
  const int p = 3, m = 6;
  std::vector<parallel::PassTimes> parts(2 * p, parallel::PassTimes{1, 1, 1});
  parts[1] = {3, 3, 0.5};  // a slow part on stage 1 whose weight gradients are cheap
  parts[4] = {0.5, 0.5, 2};
  const parallel::PipelineSchedule for_them = parallel::zero_bubble_v_schedule(p, m, parts);
  const parallel::SimulatedStep built_for_them = parallel::simulate_schedule(for_them, 2, parts, parallel::Placement::V);
  const parallel::SimulatedStep built_for_equal =
      parallel::simulate_schedule(parallel::zero_bubble_v_schedule(p, m), 2, parts, parallel::Placement::V);
  std::printf("unequal parts: step %.2f scheduled for their times, %.2f for equal passes\n", built_for_them.step_time,
              built_for_equal.step_time);
  EXPECT_LT(built_for_them.step_time, built_for_equal.step_time);
  for (int s = 0; s < p; ++s) EXPECT_LE(built_for_them.peak_in_flight[s], 2 * p);
  // Equal part times give the equal-pass schedule.
  EXPECT_EQ(parallel::zero_bubble_v_schedule(p, m, std::vector<parallel::PassTimes>(2 * p, {2, 2, 2})),
            parallel::zero_bubble_v_schedule(p, m));
  EXPECT_THROW_MSG(parallel::zero_bubble_v_schedule(p, m, std::vector<parallel::PassTimes>(4)),
                   "4 parts' pass times for 3 stages (6 parts)");
  EXPECT_THROW_MSG(parallel::simulate_schedule(for_them, 2, std::vector<parallel::PassTimes>(5), parallel::Placement::V),
                   "5 parts' pass times for 3 stages x 2 chunks");
}

// Any part times (200 random draws, a quarter of the passes taking no time,
// as a part without weights has no W): the V is built, finishes on the ideal
// machine with those times, and holds at most 2p chunk activations a stage.
TEST(Schedule, ZeroBubbleVFinishesForAnyPartTimes) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> uniform(0.1, 3);
  std::bernoulli_distribution no_time(0.25);
  auto time = [&] { return no_time(random) ? 0.0 : uniform(random); };
  for (int draw = 0; draw < 200; ++draw) {
    const int p = 1 + draw % 5, m = 1 + draw % 11;
    std::vector<parallel::PassTimes> parts;
    for (int i = 0; i < 2 * p; ++i) parts.push_back({time(), time(), time()});
    const std::string what = "draw " + std::to_string(draw) + ", p=" + std::to_string(p) + " m=" + std::to_string(m);
    parallel::PipelineSchedule zbv;
    ASSERT_NO_THROW(zbv = parallel::zero_bubble_v_schedule(p, m, parts)) << what;
    parallel::SimulatedStep step;
    ASSERT_NO_THROW(step = parallel::simulate_schedule(zbv, 2, parts, parallel::Placement::V)) << what;
    for (int s = 0; s < p; ++s) EXPECT_LE(step.peak_in_flight[s], 2 * p) << what;
  }
}

// ZB-H2, list-scheduled with one chunk a stage and up to 2p - 1 micro-
// batches held: every pass once, in order, finishes, holds no more than
// 2p - 1 a stage, and never idles less than the one-chunk floor ((p - 1) F
// of a step). With equal passes (m >= p) it meets the floor, as ZB-H1 does.
// With more micro-batches than stages (room to run forwards ahead) it never
// idles more than ZB-H1 with the same passes, and less where W is shorter
// than F (ZB-H1 has too little W to fill its waits).
TEST(Schedule, ZeroBubbleH2FinishesBetweenTheFloorAndZeroBubbleH1) {
  for (parallel::PassTimes times : {parallel::PassTimes{}, parallel::PassTimes{1, 1.4, 0.6},
                                    parallel::PassTimes{1, 1.5, 1.5}, parallel::PassTimes{2, 1, 0.5}})
    for (int p = 1; p <= 6; ++p)
      for (int m = 1; m <= 12; ++m) {
        const std::string what = "p=" + std::to_string(p) + " m=" + std::to_string(m) + " F " +
                                 std::to_string(times.forward) + " W " + std::to_string(times.backward_weight);
        const parallel::PipelineSchedule h2 = parallel::zero_bubble_h2_schedule(p, m, times);
        ASSERT_EQ(h2.size(), static_cast<size_t>(p));
        for (int s = 0; s < p; ++s) {
          std::map<int, std::string> passes;  // micro-batch -> its passes in order
          for (const parallel::Action& a : h2[s]) passes[a.micro_batch] += parallel::to_string(a)[0];
          ASSERT_EQ(passes.size(), static_cast<size_t>(m)) << what << " stage " << s;
          for (const auto& [mb, order] : passes) EXPECT_EQ(order, "FIW") << what << " stage " << s;
        }
        const parallel::SimulatedStep step = parallel::simulate_schedule(h2, 1, times);
        for (int s = 0; s < p; ++s) EXPECT_LE(step.peak_in_flight[s], 2 * p - 1) << what;
        const double floor = parallel::one_step_lower_bound(p, m, 1, times);
        EXPECT_GE(step.bubble_fraction, floor - 1e-12) << what;
        if (m < p) continue;
        if (times.forward == times.backward_weight && times.forward == times.backward_input) {
          EXPECT_NEAR(step.bubble_fraction, floor, 1e-12) << what;
        }
        if (m == p) continue;
        const double h1 = parallel::simulate_schedule(parallel::zero_bubble_h1_schedule(p, m), 1, times).bubble_fraction;
        EXPECT_LE(step.bubble_fraction, h1 + 1e-12) << what;
        if (p > 1 && times.backward_weight < times.forward) {
          EXPECT_LT(step.bubble_fraction, h1) << what;
        }
      }
  EXPECT_DOUBLE_EQ(parallel::one_step_lower_bound(4, 8, 1), 3.0 / 27);  // idle 3 F of a step 24 F + 3 F
  EXPECT_EQ(parallel::schedule_kind("zb-h2"), ScheduleKind::ZeroBubbleH2);
  EXPECT_EQ(parallel::make_schedule(ScheduleKind::ZeroBubbleH2, 3, 5), parallel::zero_bubble_h2_schedule(3, 5));
  EXPECT_THROW_MSG(parallel::zero_bubble_h2_schedule(2, 2, {1, 1, -1}),
                   "zero_bubble_h2_schedule: pass times must be finite and not negative");
}

TEST(Schedule, SimulationRefusesAWeightPassBeforeItsInputPass) {
  EXPECT_THROW_MSG(parallel::simulate_schedule({{{parallel::Pass::Forward, 0},
                                                 {parallel::Pass::BackwardWeight, 0},
                                                 {parallel::Pass::BackwardInput, 0}}}),
                   "waiting: stage 0 at W0;");
}

// Three SGD steps of `pipe` on batches of `batch` equal three of `single`
// on the same whole batches (see train_side_by_side for the tolerances).
void expect_trains_as(parallel::Pipeline& pipe, nn::Sequential single, int64_t batch) {
  optim::SGD opt_pipe(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  parallel::testing::train_side_by_side(
      single, batch,
      [&](const Tensor& x, const Tensor& y) {
        opt_pipe.zero_grad();
        Tensor loss = pipe.train_step(x, y, parallel::testing::cross_entropy_loss);
        opt_pipe.step();
        return loss;
      },
      [&](int step) {
        EXPECT_LT(max_param_difference(single->parameters(), pipe.parameters()), 1e-10) << "step " << step;
      });
}

// A pipeline of case `c` (every stage on c.device) trains as one device.
void expect_equals_single_device(const PipelineCase& c) {
  auto [single, copy] = parallel::testing::pipeline_models(c.device);
  parallel::Pipeline pipe(parallel::split_sequential(copy, c.boundaries),
                          std::vector<Device>(c.stages(), c.device),
                          {.micro_batches = c.micro_batches, .schedule = c.kind, .chunks = c.chunks});
  expect_trains_as(pipe, single, c.batch);
}

class PipelineEquivalence : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(PipelineEquivalence, EqualsSingleDeviceTraining) { expect_equals_single_device(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    SchedulesStagesMicroBatches, PipelineEquivalence,
    ::testing::Values(PipelineCase{ScheduleKind::GPipe, {4}, 1}, PipelineCase{ScheduleKind::GPipe, {2, 5}, 4},
                      PipelineCase{ScheduleKind::GPipe, {1, 3, 6}, 6}, PipelineCase{ScheduleKind::OneFOneB, {4}, 2},
                      PipelineCase{ScheduleKind::OneFOneB, {2, 5}, 4}, PipelineCase{ScheduleKind::OneFOneB, {1, 3, 6}, 6},
                      PipelineCase{ScheduleKind::OneFOneB, {1, 3, 6}, 3},
                      // 12 samples in 5 micro-batches of 3, 3, 2, 2, 2 (not chunk()'s four of 3).
                      PipelineCase{ScheduleKind::GPipe, {2, 5}, 5}, PipelineCase{ScheduleKind::OneFOneB, {2, 5}, 5, 10},
                      // Interleaved: part i on stage i % p, the last stage's output on to stage 0's next chunk.
                      PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {2, 4, 6}, .micro_batches = 4,
                                   .chunks = 2},
                      PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {2, 4, 6}, .micro_batches = 4,
                                   .batch = 10, .chunks = 2},
                      PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {1, 2, 3, 5, 6},
                                   .micro_batches = 6, .chunks = 2},
                      PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {1, 2, 3, 4, 5, 6, 7},
                                   .micro_batches = 8, .chunks = 2},
                      // Zero bubble: each backward split into the input's gradient and, later, the weights'.
                      PipelineCase{ScheduleKind::ZeroBubbleH1, {4}, 2}, PipelineCase{ScheduleKind::ZeroBubbleH1, {2, 5}, 4},
                      PipelineCase{ScheduleKind::ZeroBubbleH1, {1, 3, 6}, 6},
                      PipelineCase{ScheduleKind::ZeroBubbleH1, {1, 3, 6}, 2},
                      PipelineCase{ScheduleKind::ZeroBubbleH1, {2, 5}, 5, 10},
                      // ZB-V: two chunks a stage in a V, the loss on stage 0.
                      PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 3, 6}, .micro_batches = 4,
                                   .chunks = 2},
                      PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 3, 6}, .micro_batches = 1,
                                   .chunks = 2},
                      PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 2, 3, 5, 6},
                                   .micro_batches = 6, .chunks = 2},
                      PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 2, 3, 4, 5, 6, 7},
                                   .micro_batches = 5, .batch = 10, .chunks = 2},
                      // ZB-H2: forwards run ahead, up to 2p - 1 micro-batches a stage.
                      PipelineCase{ScheduleKind::ZeroBubbleH2, {2, 5}, 4},
                      PipelineCase{ScheduleKind::ZeroBubbleH2, {1, 3, 6}, 6},
                      PipelineCase{ScheduleKind::ZeroBubbleH2, {2, 5}, 5, 10}));

TEST(PipelineMemory, PeakActivationsArePStagesFor1F1BAndMForGPipe) {
  const int p = 4, m = 8;
  auto one_f_one_b = sleep_pipeline(p, m, ScheduleKind::OneFOneB, 1);
  one_f_one_b.train_step(ones({m, 2}), zeros({m}), sum_loss);
  auto gpipe = sleep_pipeline(p, m, ScheduleKind::GPipe, 1);
  gpipe.train_step(ones({m, 2}), zeros({m}), sum_loss);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(one_f_one_b.stats().stages[s].peak_in_flight, p - s) << "stage " << s;  // at most p
    EXPECT_EQ(gpipe.stats().stages[s].peak_in_flight, m) << "stage " << s;
  }
}

// ZB-H2's stages hold what its simulation says: up to 2p - 1 micro-batches
// between F and W, counted as the stages store and free them.
TEST(PipelineMemory, ZeroBubbleH2HoldsTwoPMinusOneMicroBatches) {
  const int p = 4, m = 8;
  auto h2 = sleep_pipeline(p, m, ScheduleKind::ZeroBubbleH2, 1, 1, 1);
  h2.train_step(ones({m, 2}), zeros({m}), sum_loss);
  const parallel::SimulatedStep simulated = parallel::simulate_schedule(parallel::zero_bubble_h2_schedule(p, m));
  expect_peaks_as_simulated(h2.stats(), simulated);
  EXPECT_EQ(*std::max_element(simulated.peak_in_flight.begin(), simulated.peak_in_flight.end()), 2 * p - 1);
}

// ZB-V scheduled for each part's pass times (as measured, see balance.h)
// trains as one device does; part times are for zb-v only, one per part.
TEST(Pipeline, ZeroBubbleVScheduledForPartTimesEqualsSingleDevice) {
  auto [single, copy] = parallel::testing::pipeline_models();
  const std::vector<parallel::PassTimes> times{{1, 1, 1}, {3, 3, 0.5}, {1, 2, 1}, {0.5, 0.5, 2}};
  parallel::Pipeline pipe(parallel::split_sequential(copy, {1, 3, 6}), std::vector<Device>(2, Device::cpu()),
                          {.micro_batches = 4, .schedule = ScheduleKind::ZeroBubbleV, .chunks = 2, .part_times = times});
  EXPECT_EQ(pipe.schedule(), parallel::zero_bubble_v_schedule(2, 4, times));
  EXPECT_NE(pipe.schedule(), parallel::zero_bubble_v_schedule(2, 4)) << "the times should change the order";
  expect_trains_as(pipe, single, 12);
  auto parts = [] { return parallel::split_sequential(parallel::testing::pipeline_models().second, {1, 3, 6}); };
  EXPECT_THROW_MSG(parallel::Pipeline(parts(), std::vector<Device>(4, Device::cpu()),
                                      {.schedule = ScheduleKind::OneFOneB, .part_times = times}),
                   "part_times are for the zb-h2 and zb-v schedules, not 1f1b");
  // ZB-H2 too is built for its stages' times.
  parallel::Pipeline h2(parallel::split_sequential(parallel::testing::pipeline_models().second, {1, 3, 6}),
                        std::vector<Device>(4, Device::cpu()),
                        {.micro_batches = 6, .schedule = ScheduleKind::ZeroBubbleH2, .part_times = times});
  EXPECT_EQ(h2.schedule(), parallel::zero_bubble_h2_schedule(4, 6, times));
  EXPECT_EQ(parallel::make_schedule(ScheduleKind::ZeroBubbleH2, 4, 6, 1, times),
            parallel::zero_bubble_h2_schedule(4, 6, times));
  EXPECT_NE(h2.schedule(), parallel::zero_bubble_h2_schedule(4, 6)) << "the times should change the order";
  EXPECT_THROW_MSG(parallel::Pipeline(parts(), std::vector<Device>(2, Device::cpu()),
                                      {.schedule = ScheduleKind::ZeroBubbleV, .chunks = 2,
                                       .part_times = {times[0], times[1]}}),
                   "2 parts' pass times for 2 stages (4 parts)");
}

// Each stage records its passes, in its row's order, inside the step; the
// chart of them is one line per stage, as wide as asked.
TEST(PipelineTimeline, StagesRecordWhenTheirPassesRan) {
  const int p = 3, m = 4;
  auto pipe = sleep_pipeline(p, m, ScheduleKind::ZeroBubbleH1, 2, 1, 2);
  pipe.train_step(ones({m, 2}), zeros({m}), sum_loss);
  const parallel::PipelineStats& stats = pipe.stats();
  for (int s = 0; s < p; ++s) {
    const std::vector<parallel::PassTime>& passes = stats.stages[s].passes;
    ASSERT_EQ(passes.size(), pipe.schedule()[s].size()) << "stage " << s;
    double previous_end = 0;
    for (size_t i = 0; i < passes.size(); ++i) {
      EXPECT_EQ(passes[i].action, pipe.schedule()[s][i]) << "stage " << s << " pass " << i;
      EXPECT_GE(passes[i].start, previous_end) << "stage " << s << " pass " << i;
      EXPECT_GE(passes[i].end, passes[i].start);
      previous_end = passes[i].end;
    }
    EXPECT_LE(previous_end, stats.step_seconds);
  }
  const std::string chart = parallel::timeline(stats, 60);
  std::istringstream lines(chart);
  std::string line;
  for (int s = 0; s < p; ++s) {
    ASSERT_TRUE(std::getline(lines, line));
    const std::string prefix = "stage " + std::to_string(s) + ": ";
    EXPECT_EQ(line.rfind(prefix, 0), 0u) << line;
    EXPECT_LE(line.size(), prefix.size() + 60) << line;
  }
  EXPECT_FALSE(std::getline(lines, line)) << "one line per stage";
}

TEST(Pipeline, InterleavedPartsMustFillEveryStagesChunks) {
  auto parts = [](int n) {
    std::vector<nn::ModulePtr> out;
    for (int i = 0; i < n; ++i) out.push_back(nn::Linear(4, 4));
    return out;
  };
  const parallel::PipelineOptions two_chunks{.micro_batches = 4, .schedule = ScheduleKind::Interleaved1F1B, .chunks = 2};
  EXPECT_THROW_MSG(parallel::Pipeline(parts(3), {Device::cpu(), Device::cpu()}, two_chunks),
                   "Pipeline: got 3 stages for 2 devices and 2 chunks each");
  EXPECT_THROW_MSG(parallel::Pipeline(parts(4), {Device::cpu(), Device::cpu()},
                                      {.micro_batches = 3, .schedule = ScheduleKind::Interleaved1F1B, .chunks = 2}),
                   "3 micro-batches are not a multiple of the 2 stages");
  EXPECT_THROW_MSG(parallel::Pipeline(parts(4), {Device::cpu(), Device::cpu()}, {.micro_batches = 4, .chunks = 2}),
                   "the 1f1b schedule runs one chunk per stage, got 2");
  EXPECT_NO_THROW(parallel::Pipeline(parts(4), {Device::cpu(), Device::cpu()}, two_chunks));
}

TEST(Pipeline, AFailingStageStopsEveryStageWithItsMessage) {
  parallel::Pipeline pipe({nn::Linear(4, 3), nn::Linear(5, 2)}, {Device::cpu(), Device::cpu()},
                          {.micro_batches = 2});
  EXPECT_THROW_MSG(pipe.train_step(ones({4, 4}), zeros({4}), sum_loss), "does not end in the weight's in_features 5");
  EXPECT_THROW_MSG(pipe.train_step(ones({1, 4}), zeros({1}), sum_loss), "a batch of 1 cannot make 2 micro-batches");
}

TEST(Pipeline, StagesThatShareAParameterAreRefused) {
  nn::Linear shared(4, 4);
  EXPECT_THROW_MSG(parallel::Pipeline({nn::Sequential(shared, nn::ReLU()), nn::Sequential(nn::Linear(4, 4), shared)},
                                      {Device::cpu(), Device::cpu()}),
                   "Pipeline: stages 0 and 1 share a parameter ([4, 4])");
  // One module used twice inside one stage is that stage's own business.
  EXPECT_NO_THROW(parallel::Pipeline({nn::Sequential(shared, shared), nn::Linear(4, 2)}, {Device::cpu(), Device::cpu()}));
}

// Three stages on one GPU, each on a queue (stream) of its own, so they overlap.
TEST(PipelineCuda, StagesOnOneGpuEqualSingleDevice) {
  LOOM_REQUIRE_CUDA();
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    expect_equals_single_device({.kind = kind, .boundaries = {2, 5}, .micro_batches = 4, .batch = 10,
                                 .device = Device::cuda(0)});
  // Interleaved: two stages of two chunks each, the second stage's output back to the first's next chunk.
  expect_equals_single_device({.kind = ScheduleKind::Interleaved1F1B, .boundaries = {2, 4, 6}, .micro_batches = 4,
                               .batch = 10, .device = Device::cuda(0), .chunks = 2});
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleH2})
    expect_equals_single_device({.kind = kind, .boundaries = {2, 5}, .micro_batches = 4, .batch = 10,
                                 .device = Device::cuda(0)});
  // ZB-V: two stages of two chunks in a V; the loss on the first stage.
  expect_equals_single_device({.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 3, 6}, .micro_batches = 4,
                               .batch = 10, .device = Device::cuda(0), .chunks = 2});
}

// The batch on a GPU no stage runs on, written last on a busy queue of its
// own: the stages (on cuda:0) copy it only after that write, so the loss is
// the one of the same pipeline fed from the CPU.
TEST(PipelineCuda, InputsOnAnotherGpuAreReadAfterTheCallersWork) {
  LOOM_REQUIRE_CUDA();
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 GPUs; this machine has " << cuda_device_count();
  nn::Sequential model = parallel::testing::pipeline_models(Device::cuda(0)).second;
  parallel::Pipeline pipe(parallel::split_sequential(model, {2, 5}), {Device::cuda(0), Device::cuda(0), Device::cuda(0)},
                          {.micro_batches = 2});
  manual_seed(21);
  const Tensor x_cpu = randn({8, 6}, {.dtype = kFloat64});
  const Tensor y_cpu = zeros({8}, {.dtype = kInt64});
  const double expected = pipe.train_step(x_cpu, y_cpu, parallel::testing::cross_entropy_loss).item();
  DeviceQueue busy_queue(Device::cuda(1));
  DeviceQueue::Scope on_busy(busy_queue);
  Tensor x = full({8, 6}, 1e6, {.dtype = kFloat64, .device = Device::cuda(1)});
  Tensor busy = full({2048, 2048}, 1.0 / 2048, {.device = Device::cuda(1)});
  for (int k = 0; k < 16; ++k) busy = busy.matmul(busy);
  x.copy_(x_cpu);  // lands after the products
  const double got = pipe.train_step(x, y_cpu.to(Device::cuda(1)), parallel::testing::cross_entropy_loss).item();
  EXPECT_NEAR(got, expected, 1e-12);
}

// Stages alternate between the CPU and the GPU: activations and gradients
// cross in both directions through recorded copies.
TEST(LayerSplitCuda, AcrossCpuAndGpuEqualsSingleDevice) {
  LOOM_REQUIRE_CUDA();
  auto [single, copy] = parallel::testing::pipeline_models();
  parallel::LayerSplit split(parallel::split_sequential(copy, {3, 6}), {Device::cpu(), Device::cuda(0), Device::cpu()});
  Tensor x = randn({5, 6}, {.dtype = kFloat64});
  Tensor out = split->forward(x);
  EXPECT_TRUE(out.device().is_cpu());
  out.square().sum().backward();
  single->forward(x).square().sum().backward();
  TensorList a = single->parameters(), b = split->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(testing::max_rel_error(b[i].grad(), a[i].grad()), 1e-10) << i;
}

TEST(LayerSplit, EqualsSingleDevice) {
  manual_seed(8);
  nn::Sequential single = parallel::testing::make_pipeline_net();
  nn::Sequential copy(single->clone());
  parallel::LayerSplit split(parallel::split_sequential(copy, {3, 6}),
                             {Device::cpu(), Device::cpu(), Device::cpu()});
  Tensor x = randn({5, 6});
  single->forward(x).square().sum().backward();
  split->forward(x).square().sum().backward();
  TensorList a = single->parameters(), b = split->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) testing::expect_values(b[i].grad(), testing::values(a[i].grad()), 1e-6);
}

}  // namespace
}  // namespace loom
