// DistributedPipeline with the threads backend: ranks are threads of this
// process, one stage each, exchanging activations and gradients with
// send/recv exactly as processes under mpirun do (pipeline_mpi_test.cc).
// The bubbles measured on the wall clock: pipeline_bubble_test.cc.
#include "parallel/pipeline/distributed_pipeline.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <sstream>

#include "optim/optimizer.h"
#include "parallel/comm/thread_group.h"
#include "parallel/trace.h"
#include "tests/parallel/pipeline_checks.h"
#include "tests/parallel/sleep_stage.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

using testing::PipelineCase;
using testing::run_sleep_pipeline;
using Models = std::pair<nn::Sequential, nn::Sequential>;

class DistributedPipelineEquivalence : public ::testing::TestWithParam<PipelineCase> {};

TEST_P(DistributedPipelineEquivalence, EqualsSingleDeviceTraining) {
  const PipelineCase& c = GetParam();
  testing::run_prepared_ranks<Models>(
      c.stages(), [](int) { return testing::pipeline_models(); },
      [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
        testing::check_pipeline_matches_single_device(group, m.first, m.second, c);
      });
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesRanksMicroBatches, DistributedPipelineEquivalence,
    ::testing::Values(
        // One rank: the schedule degenerates to gradient accumulation.
        PipelineCase{ScheduleKind::OneFOneB, {}, 3},
        PipelineCase{ScheduleKind::GPipe, {4}, 1}, PipelineCase{ScheduleKind::OneFOneB, {4}, 2},
        PipelineCase{ScheduleKind::GPipe, {2, 5}, 4}, PipelineCase{ScheduleKind::OneFOneB, {2, 5}, 4},
        // 10 samples in 4 micro-batches of 3, 3, 2, 2: the losses' weights differ.
        PipelineCase{ScheduleKind::OneFOneB, {2, 5}, 4, 10}, PipelineCase{ScheduleKind::GPipe, {1, 3, 6}, 6},
        PipelineCase{ScheduleKind::OneFOneB, {1, 3, 6}, 6}, PipelineCase{ScheduleKind::OneFOneB, {1, 3, 6}, 3},
        // Interleaved: rank r runs parts r, p + r, ...; rank p - 1 sends on to rank 0's next chunk.
        PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {2, 4, 6}, .micro_batches = 4, .chunks = 2},
        PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {2, 4, 6}, .micro_batches = 4, .batch = 10,
                     .chunks = 2},
        PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {1, 2, 3, 5, 6}, .micro_batches = 6,
                     .chunks = 2},
        PipelineCase{.kind = ScheduleKind::Interleaved1F1B, .boundaries = {1, 2, 3, 5, 6}, .micro_batches = 4,
                     .chunks = 3},
        // Zero bubble: the input's gradient goes upstream at I, the weights' come at W.
        PipelineCase{ScheduleKind::ZeroBubbleH1, {}, 3}, PipelineCase{ScheduleKind::ZeroBubbleH1, {4}, 2},
        PipelineCase{ScheduleKind::ZeroBubbleH1, {2, 5}, 4, 10}, PipelineCase{ScheduleKind::ZeroBubbleH1, {1, 3, 6}, 6},
        // ZB-H2: forwards run ahead, up to 2p - 1 micro-batches a rank.
        PipelineCase{ScheduleKind::ZeroBubbleH2, {2, 5}, 5, 10}, PipelineCase{ScheduleKind::ZeroBubbleH2, {1, 3, 6}, 6},
        // ZB-V: rank r runs parts r and 2p - 1 - r; the last rank turns each micro-batch around in memory,
        // rank 0 has the loss.
        PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 3, 6}, .micro_batches = 4, .chunks = 2},
        PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 3, 6}, .micro_batches = 5, .batch = 10,
                     .chunks = 2},
        PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 2, 3, 5, 6}, .micro_batches = 6,
                     .chunks = 2},
        PipelineCase{.kind = ScheduleKind::ZeroBubbleV, .boundaries = {1, 2, 3, 5, 6}, .micro_batches = 2,
                     .chunks = 2}));

// Counted as each rank stores and frees activations, not computed from the schedule.
TEST(DistributedPipelineMemory, PeakActivationsArePFor1F1BAndMForGPipe) {
  const int p = 4, m = 8;
  std::vector<StageStats> one_f_one_b = run_sleep_pipeline(p, m, ScheduleKind::OneFOneB, 1);
  std::vector<StageStats> gpipe = run_sleep_pipeline(p, m, ScheduleKind::GPipe, 1);
  for (int s = 0; s < p; ++s) {
    EXPECT_EQ(one_f_one_b[s].peak_in_flight, p - s) << "rank " << s;  // at most p
    EXPECT_EQ(gpipe[s].peak_in_flight, m) << "rank " << s;
  }
  // Each micro-batch's [1, 2] float32 activation goes forward and its gradient back.
  EXPECT_EQ(one_f_one_b[0].bytes_sent, m * 2 * 4);
  EXPECT_EQ(one_f_one_b[1].bytes_sent, 2 * m * 2 * 4);
  EXPECT_EQ(one_f_one_b[p - 1].bytes_sent, m * 2 * 4);
}

// Every rank records its passes; rank 0 draws them all, one row per rank,
// each in its schedule's order.
TEST(DistributedPipeline, TimelineGathersEveryRanksPasses) {
  const int p = 3, m = 4;
  std::vector<std::string> charts(p);
  testing::run_rank_threads(p, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    DistributedPipeline pipe(std::make_shared<testing::SleepStageImpl>(2, 2), group,
                             {.micro_batches = m, .schedule = ScheduleKind::ZeroBubbleH1});
    EXPECT_THROW_MSG(pipe.timeline(), "no train_step to draw yet");
    pipe.train_step(ones({m, 2}), zeros({m}), testing::sum_loss);
    ASSERT_EQ(pipe.stats().passes.size(), pipe.actions().size());
    for (size_t i = 0; i < pipe.actions().size(); ++i) EXPECT_EQ(pipe.stats().passes[i].action, pipe.actions()[i]);
    charts[rank] = pipe.timeline(60);
  });
  EXPECT_EQ(charts[1], "");
  EXPECT_EQ(charts[2], "");
  std::istringstream lines(charts[0]);
  std::string line;
  for (int s = 0; s < p; ++s) {
    ASSERT_TRUE(std::getline(lines, line)) << charts[0];
    EXPECT_EQ(line.rfind("stage " + std::to_string(s) + ": ", 0), 0u) << line;
  }
  EXPECT_FALSE(std::getline(lines, line)) << "one line per rank";
}

// Rank 0's cuts and pass times reach every rank (each rank timed its own).
TEST(DistributedPipeline, RankZerosCutsAndPassTimesAreShared) {
  std::vector<std::vector<int>> cuts(3);
  std::vector<std::vector<PassTimes>> times(3);
  testing::run_rank_threads(3, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    cuts[rank] = rank == 0 ? std::vector<int>{2, 7} : std::vector<int>{rank};
    times[rank] = std::vector<PassTimes>(rank + 1, PassTimes{1.0 + rank, 0.25, 1e-6 * rank});
    share_boundaries(cuts[rank], *group);
    share_part_times(times[rank], *group);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(cuts[r], (std::vector<int>{2, 7})) << "rank " << r;
    ASSERT_EQ(times[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(times[r][0].forward, 1.0);
    EXPECT_EQ(times[r][0].backward_input, 0.25);
    EXPECT_EQ(times[r][0].backward_weight, 0.0);
  }
}

TEST(DistributedPipeline, ChunksMustMatchTheOptions) {
  const PipelineOptions two_chunks{.micro_batches = 4, .schedule = ScheduleKind::Interleaved1F1B, .chunks = 2};
  auto two_parts = [] { return std::vector<nn::ModulePtr>{nn::Linear(4, 4), nn::Linear(4, 4)}; };
  testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_THROW_MSG(DistributedPipeline(nn::Linear(4, 4), group, two_chunks),
                     "DistributedPipeline: got 1 chunks for options.chunks = 2");
    // Tags hold a chunk and a micro-batch: half as many micro-batches fit with two chunks.
    PipelineOptions too_many = two_chunks;
    too_many.micro_batches = (ProcessGroup::kMaxTag + 1) / 4 + 1;
    EXPECT_THROW_MSG(DistributedPipeline(two_parts(), group, too_many),
                     "DistributedPipeline: micro_batches must be in [1, " +
                         std::to_string((ProcessGroup::kMaxTag + 1) / 4) + "]");
    EXPECT_NO_THROW(DistributedPipeline(two_parts(), group, two_chunks));
  });
  testing::run_rank_threads(1, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_THROW_MSG(DistributedPipeline(two_parts(), group, two_chunks),
                     "DistributedPipeline: 2 chunks a rank need at least two ranks");
  });
}

// With tracing on, each rank's lane shows its passes and its waits, and each
// send and receive appears on the rank's communication lane.
TEST(DistributedPipeline, TraceShowsPassesWaitsAndSends) {
  trace::clear();
  trace::enable(true);
  run_sleep_pipeline(2, 2, ScheduleKind::OneFOneB, 1);
  trace::enable(false);
  auto count = [](const std::string& name, const std::string& category, const std::string& lane) {
    int n = 0;
    for (const trace::Event& e : trace::events())
      if (e.name == name && e.category == category && e.lane == trace::lane(lane) && e.end_us >= e.begin_us) ++n;
    return n;
  };
  for (int r = 0; r < 2; ++r) {
    const std::string lane = "stage " + std::to_string(r) + " (rank " + std::to_string(r) + ")";
    EXPECT_EQ(count("forward", "compute", lane), 2) << lane;
    EXPECT_EQ(count("backward", "compute", lane), 2) << lane;
  }
  EXPECT_EQ(count("wait activation", "idle", "stage 1 (rank 1)"), 2);
  EXPECT_EQ(count("wait gradient", "idle", "stage 0 (rank 0)"), 2);
  // The process group records the sends on each rank's lane: stage 0 sends
  // each micro-batch's header and activation, stage 1 each gradient.
  EXPECT_EQ(count("send", "communication", "rank0/comm"), 4);
  EXPECT_EQ(count("send", "communication", "rank1/comm"), 2);
  EXPECT_EQ(count("recv", "communication", "rank1/comm"), 4);
  trace::clear();
}

// A stage that throws stops its own rank with its message; its neighbour,
// waiting for a gradient that never comes, fails with the group's timeout
// error naming itself, the receive and the peer: nothing hangs.
TEST(DistributedPipeline, AFailingStageEndsItsNeighbourWithATimeout) {
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(500);
  auto groups = ThreadGroup::create(2, options);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      nn::ModulePtr stage = r == 0 ? nn::Linear(4, 3) : nn::Linear(5, 2);  // 3 != 5
      DistributedPipeline pipe(stage, groups[r], {.micro_batches = 2});
      try {
        pipe.train_step(ones({4, 4}), zeros({4}), testing::sum_loss);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_NE(errors[1].find("does not end in the weight's in_features 5"), std::string::npos) << errors[1];
  EXPECT_NE(errors[0].find("rank 0: recv #"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("from rank 1 (tag 1, 6 x float32): timed out after 0.5 s"), std::string::npos) << errors[0];
}

TEST(DistributedPipeline, RejectsBadArguments) {
  auto group = ThreadGroup::create(1, testing::test_options())[0];
  EXPECT_THROW_MSG(DistributedPipeline(nn::Linear(2, 2), group, {.micro_batches = 0}),
                   "micro_batches must be in [1, 16384], got 0");
  EXPECT_THROW_MSG(DistributedPipeline(nullptr, group), "needs a stage and a process group");
  DistributedPipeline pipe(nn::Linear(2, 2), group, {.micro_batches = 3});
  EXPECT_THROW_MSG(pipe.train_step(Tensor(), zeros({4}), testing::sum_loss),
                   "DistributedPipeline (rank 0's inputs): a batch of 0 cannot make 3 micro-batches");
  EXPECT_THROW_MSG(pipe.train_step(ones({4, 2}), zeros({2}), testing::sum_loss),
                   "the loss rank's targets): a batch of 2 cannot make 3 micro-batches");
  EXPECT_THROW_MSG(pipe.train_step(ones({4, 2}), zeros({5}), testing::sum_loss),
                   "pipeline: micro-batch 1 has 1 samples but its targets have 2");
}

// Each rank's optimizer steps its own stage's parameters only. After
// share_stage_optimizer_state every rank holds every parameter's step count
// and moments, each from the rank that trains it: the same state on all.
TEST(DistributedPipeline, SharedOptimizerStateIsEachOwnersOnEveryRank) {
  std::vector<nn::NamedTensors> before(2), after(2);
  testing::run_rank_threads(2, [&](int r, const std::shared_ptr<ProcessGroup>& group) {
    std::vector<nn::ModulePtr> parts{nn::Linear(3, 4), nn::Linear(4, 2)};
    TensorList params;
    for (const nn::ModulePtr& part : parts)
      for (const Tensor& p : part->parameters()) params.push_back(p);
    optim::AdamW opt(params);
    for (int step = 0; step < 2 + r; ++step) {  // the ranks step different counts
      opt.zero_grad();
      for (const Tensor& p : parts[r]->parameters()) p.set_grad(full(p.shape(), 0.5 + r + step));
      opt.step();
    }
    before[r] = opt.state_dict();
    share_stage_optimizer_state(parts, opt, *group);
    after[r] = opt.state_dict();
  });
  auto by_name = [](const nn::NamedTensors& state) { return std::map<std::string, Tensor>(state.begin(), state.end()); };
  const auto rank0 = by_name(after[0]), rank1 = by_name(after[1]);
  ASSERT_EQ(rank0.size(), rank1.size());
  for (const auto& [name, value] : rank0) loom::testing::expect_values(rank1.at(name), loom::testing::values(value), 0);
  // Parameters 0-1 are part 0's (rank 0 trains it), 2-3 part 1's (rank 1).
  const auto owner0 = by_name(before[0]), owner1 = by_name(before[1]);
  for (int k = 0; k < 4; ++k)
    for (const char* entry : {"step", "exp_avg", "exp_avg_sq"}) {
      const std::string key = "state." + std::to_string(k) + "." + entry;
      const auto& owner = k < 2 ? owner0 : owner1;
      SCOPED_TRACE(key);
      loom::testing::expect_values(rank0.at(key), loom::testing::values(owner.at(key)), 0);
    }
  EXPECT_EQ(rank0.at("state.0.step").item<int64_t>(), 2);
  EXPECT_EQ(rank0.at("state.2.step").item<int64_t>(), 3);
}

}  // namespace
}  // namespace loom::parallel
