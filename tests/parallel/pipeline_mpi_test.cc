// DistributedPipeline over MPI: one process per stage (run by
// mpi_test_runner.sh under mpirun -np 2 and -np 3).
#include <gtest/gtest.h>

#include "tests/parallel/mpi_world.h"
#include "tests/parallel/pipeline_checks.h"

namespace loom::parallel {
namespace {

using testing::PipelineCase;

// Cuts the eight-child net into one stage per rank.
std::vector<int> boundaries_for(int ranks) { return ranks == 2 ? std::vector<int>{4} : std::vector<int>{2, 5}; }

void expect_matches_single_device(ScheduleKind kind, int micro_batches, int64_t batch) {
  auto [reference, model] = testing::pipeline_models();
  PipelineCase c{kind, boundaries_for(testing::mpi_world()->size()), micro_batches, batch};
  testing::check_pipeline_matches_single_device(testing::mpi_world(), reference, model, c);
}

TEST(DistributedPipelineMpi, GPipeMatchesSingleDevice) { expect_matches_single_device(ScheduleKind::GPipe, 4, 12); }
TEST(DistributedPipelineMpi, OneFOneBMatchesSingleDevice) { expect_matches_single_device(ScheduleKind::OneFOneB, 6, 12); }
TEST(DistributedPipelineMpi, ZeroBubbleH1MatchesSingleDevice) {
  expect_matches_single_device(ScheduleKind::ZeroBubbleH1, 6, 12);
}
TEST(DistributedPipelineMpi, ZeroBubbleH2MatchesSingleDevice) {
  expect_matches_single_device(ScheduleKind::ZeroBubbleH2, 6, 12);
}
TEST(DistributedPipelineMpi, UnevenMicroBatchesMatchSingleDevice) {
  expect_matches_single_device(ScheduleKind::OneFOneB, 4, 10);
}

// Two chunks per rank (the model cut into 2p parts), `micro_batches` of them.
void expect_two_chunks_match_single_device(ScheduleKind kind, int micro_batches) {
  auto [reference, model] = testing::pipeline_models();
  const int p = testing::mpi_world()->size();
  const std::vector<int> cuts = p == 2 ? std::vector<int>{2, 4, 6} : std::vector<int>{1, 2, 3, 5, 6};
  testing::check_pipeline_matches_single_device(
      testing::mpi_world(), reference, model,
      {.kind = kind, .boundaries = cuts, .micro_batches = micro_batches, .chunks = 2});
}

// Interleaved: the last rank's activations travel to rank 0 and back.
TEST(DistributedPipelineMpi, InterleavedMatchesSingleDevice) {
  expect_two_chunks_match_single_device(ScheduleKind::Interleaved1F1B, 2 * testing::mpi_world()->size());
}

// ZB-V: the two chunks in a V; the last rank keeps its turn in memory and
// rank 0 computes the loss.
TEST(DistributedPipelineMpi, ZeroBubbleVMatchesSingleDevice) {
  expect_two_chunks_match_single_device(ScheduleKind::ZeroBubbleV, 2 * testing::mpi_world()->size() + 1);
}

// Activations of 256 KB, past MPI's eager limit (pipeline_checks.h).
TEST(DistributedPipelineMpi, InterleavedWithActivationsPastTheEagerLimit) {
  testing::check_interleaved_with_large_activations(testing::mpi_world());
}

}  // namespace
}  // namespace loom::parallel
