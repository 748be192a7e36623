// Sharded data parallelism over MPI: one process per rank (run under mpirun
// -np 2 and -np 3), so the allocator also measures one rank's memory.
#include <gtest/gtest.h>

#include "tests/parallel/mpi_world.h"
#include "tests/parallel/sharding_checks.h"

namespace loom::parallel {
namespace {

using testing::mpi_world;
using testing::ShardCase;

void expect_zero_matches_single_device(ShardCase c) {
  auto [reference, local] = testing::sharded_models(mpi_world()->rank());
  testing::check_zero_matches_single_device(mpi_world(), reference, local, c);
}

TEST(ZeroMpi, Stage1MatchesSingleDevice) { expect_zero_matches_single_device({.stage = 1, .bucket_cap_bytes = 2048}); }
TEST(ZeroMpi, Stage2MatchesSingleDevice) { expect_zero_matches_single_device({.stage = 2, .bucket_cap_bytes = 2048}); }
TEST(ZeroMpi, Stage1MemoryMatchesTheModel) { testing::check_zero_memory(mpi_world(), 1); }
TEST(ZeroMpi, Stage2MemoryMatchesTheModel) { testing::check_zero_memory(mpi_world(), 2); }

}  // namespace
}  // namespace loom::parallel
