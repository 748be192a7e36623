// Sharded data parallelism over MPI: one process per rank (run under mpirun
// -np 2 and -np 3), so the allocator also measures one rank's memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

void expect_fsdp_matches_single_device(testing::FsdpCase c) {
  auto [reference, local] = testing::fsdp_models(mpi_world()->rank(), c.units);
  testing::check_fsdp_matches_single_device(mpi_world(), reference, local, c);
}

TEST(FsdpMpi, UnitPerLayerMatchesSingleDevice) { expect_fsdp_matches_single_device({.units = testing::Units::Layers}); }
TEST(FsdpMpi, NestedUnitsMatchSingleDevice) { expect_fsdp_matches_single_device({.units = testing::Units::Nested}); }
TEST(FsdpMpi, MovesOneAndAHalfTimesDdpsBytes) {
  testing::check_fsdp_traffic(mpi_world(), testing::fsdp_models(mpi_world()->rank(), testing::Units::Layers).second);
}
TEST(FsdpMpi, MemoryMatchesTheModel) { testing::check_fsdp_memory(mpi_world()); }

// Every rank's process writes into the same folder: rank 0 names it.
std::string shared_dir(const std::string& name) {
  std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(FsdpMpi, FullStateLoadsOnOneDevice) {
  auto [reference, local] = testing::fsdp_models(mpi_world()->rank(), testing::Units::Layers);
  testing::check_fsdp_full_state_loads_on_one_device(mpi_world(), reference, local,
                                                     shared_dir("fsdp-full") + "/model.safetensors");
}

TEST(FsdpMpi, ShardedSaveLoadResumesExactly) {
  auto [reference, local] = testing::fsdp_models(mpi_world()->rank(), testing::Units::Layers);
  auto fresh = testing::fsdp_models(mpi_world()->rank() + 1, testing::Units::Layers).second;
  testing::check_fsdp_sharded_resume(mpi_world(), reference, local, fresh, shared_dir("fsdp-sharded"));
}

}  // namespace
}  // namespace loom::parallel
