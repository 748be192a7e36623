// Hybrid data x pipeline over MPI: 2 x 2 under mpirun -np 4 (--oversubscribe
// on a two-core machine), one process per rank.
#include <gtest/gtest.h>

#include "tests/parallel/mpi_world.h"
#include "tests/parallel/pipeline_checks.h"

namespace loom::parallel {
namespace {

TEST(HybridMpi, TwoByTwoOneFOneBMatchesSingleDevice) {
  testing::check_hybrid_matches_single_device(testing::mpi_world(), 2, {4}, ScheduleKind::OneFOneB, 3,
                                              testing::pipeline_models());
}
// The data group's all-reduce fires as the last W pass accumulates.
TEST(HybridMpi, TwoByTwoZeroBubbleMatchesSingleDevice) {
  testing::check_hybrid_matches_single_device(testing::mpi_world(), 2, {4}, ScheduleKind::ZeroBubbleH1, 3,
                                              testing::pipeline_models());
}
TEST(HybridMpi, TwoByTwoGPipeMatchesSingleDevice) {
  testing::check_hybrid_matches_single_device(testing::mpi_world(), 2, {4}, ScheduleKind::GPipe, 2,
                                              testing::pipeline_models());
}
// Two chunks a stage in a V: each chunk's all-reduce fires as its own last W accumulates.
TEST(HybridMpi, TwoByTwoZeroBubbleVMatchesSingleDevice) {
  testing::check_hybrid_matches_single_device(testing::mpi_world(), 2, {2, 4, 6}, ScheduleKind::ZeroBubbleV, 4,
                                              testing::pipeline_models());
}

}  // namespace
}  // namespace loom::parallel
