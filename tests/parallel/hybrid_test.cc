// Hybrid data x pipeline over the threads backend: meshes of 2 x 2, 3 x 2
// and 2 x 3 ranks (1F1B, GPipe, ZB-H1, and with two chunks a stage
// interleaved and ZB-V) equal single-device training step after step.
#include <gtest/gtest.h>

#include "tests/parallel/pipeline_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using Models = std::pair<nn::Sequential, nn::Sequential>;

void expect_hybrid(int data, std::vector<int> boundaries, ScheduleKind kind, int micro_batches) {
  const int world = data * (static_cast<int>(boundaries.size()) + 1) / chunks_for(kind);
  testing::run_prepared_ranks<Models>(
      world, [](int) { return testing::pipeline_models(); },
      [&](const std::shared_ptr<ProcessGroup>& group, Models& models) {
        testing::check_hybrid_matches_single_device(group, data, boundaries, kind, micro_batches, models);
      });
}

TEST(Hybrid, TwoByTwoOneFOneB) { expect_hybrid(2, {4}, ScheduleKind::OneFOneB, 3); }
TEST(Hybrid, TwoByTwoGPipe) { expect_hybrid(2, {4}, ScheduleKind::GPipe, 2); }
TEST(Hybrid, ThreeByTwo) { expect_hybrid(3, {3}, ScheduleKind::OneFOneB, 2); }
TEST(Hybrid, TwoByThree) { expect_hybrid(2, {2, 5}, ScheduleKind::OneFOneB, 3); }
// The data group averages the gradients as the last W accumulates them.
TEST(Hybrid, TwoByThreeZeroBubble) { expect_hybrid(2, {2, 5}, ScheduleKind::ZeroBubbleH1, 3); }
TEST(Hybrid, OneMicroBatch) { expect_hybrid(2, {4}, ScheduleKind::GPipe, 1); }
// Two chunks a stage, each chunk's gradients averaged as its own last B or W accumulates them.
TEST(Hybrid, TwoByTwoInterleaved) { expect_hybrid(2, {2, 4, 6}, ScheduleKind::Interleaved1F1B, 4); }
TEST(Hybrid, TwoByTwoZeroBubbleV) { expect_hybrid(2, {2, 4, 6}, ScheduleKind::ZeroBubbleV, 4); }
TEST(Hybrid, TwoByThreeZeroBubbleV) { expect_hybrid(2, {1, 2, 3, 5, 6}, ScheduleKind::ZeroBubbleV, 3); }

}  // namespace
}  // namespace loom::parallel
