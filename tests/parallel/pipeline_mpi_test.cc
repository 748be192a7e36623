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
TEST(DistributedPipelineMpi, UnevenMicroBatchesMatchSingleDevice) {
  expect_matches_single_device(ScheduleKind::OneFOneB, 4, 10);
}

}  // namespace
}  // namespace loom::parallel
