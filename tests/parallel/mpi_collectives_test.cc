// The MPI backend under a real mpirun (np 2 and 3; see BUILD): every
// collective against the same hand-computed results as the threads backend.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "parallel/comm/init.h"
#include "parallel/comm/mpi_group.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/subgroup_checks.h"
#include "tests/parallel/mpi_world.h"

namespace loom::parallel::testing {
namespace {

ProcessGroup& world() { return *mpi_world(); }

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : -1;
}

TEST(Mpi, InitUnderMpirunGivesTheMpiBackend) {
  EXPECT_TRUE(launched_by_mpi());
  EXPECT_EQ(world().backend(), "mpi");
  EXPECT_EQ(world().size(), env_int("OMPI_COMM_WORLD_SIZE"));
  EXPECT_EQ(world().rank(), env_int("OMPI_COMM_WORLD_RANK"));
  EXPECT_EQ(world().local_rank(), env_int("OMPI_COMM_WORLD_LOCAL_RANK"));
  EXPECT_EQ(local_rank(), env_int("OMPI_COMM_WORLD_LOCAL_RANK"));
}

TEST(Mpi, AllReduce) { check_all_reduce(world()); }
TEST(Mpi, AllReduce16Bit) { check_all_reduce_16bit(world()); }
TEST(Mpi, LargeMessages) { check_large_messages(world()); }
TEST(Mpi, AllReduceInt64IsExact) { check_all_reduce_int64_exact(world()); }
TEST(Mpi, Broadcast) { check_broadcast(world()); }
TEST(Mpi, AllGather) { check_all_gather(world()); }
TEST(Mpi, ReduceScatter) { check_reduce_scatter(world()); }
TEST(Mpi, InPlace) { check_in_place(world()); }
TEST(Mpi, SendRecv) { check_send_recv(world()); }
TEST(Mpi, InOrderCompletion) { check_in_order_completion(world()); }
TEST(Mpi, ReceiveDoesNotWaitForAnEarlierSend) { check_receive_does_not_wait_for_an_earlier_send(world()); }
TEST(Mpi, OverlappingOps) { check_overlapping_ops(world()); }
TEST(Mpi, Split) { check_split(world()); }
TEST(Mpi, Mesh) { check_mesh(world()); }
TEST(Mpi, Stats) { check_stats(world()); }
TEST(Mpi, Mismatches) { check_mismatches(world()); }

// Each rank leaves a file before the barrier; after it, all files are there.
TEST(Mpi, BarrierWaitsForEveryRank) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  ASSERT_NE(tmp, nullptr) << "run under bazel test";
  std::filesystem::path dir = std::filesystem::path(tmp) / "barrier";
  std::filesystem::create_directories(dir);
  for (int round = 0; round < 3; ++round) {
    std::ofstream(dir / (std::to_string(round) + "." + std::to_string(world().rank()))) << "here";
    world().barrier()->wait();
    for (int r = 0; r < world().size(); ++r)
      EXPECT_TRUE(std::filesystem::exists(dir / (std::to_string(round) + "." + std::to_string(r))))
          << "rank " << r << " round " << round;
  }
}

// A second group of all processes, without the descriptor exchange where it
// can be skipped: the results are the same.
TEST(Mpi, WithoutConsistencyChecks) {
  ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  options.check_consistency = false;
  auto unchecked = MpiGroup::world(options);
  check_all_reduce(*unchecked);
  check_broadcast(*unchecked);
  check_all_gather(*unchecked);
  check_reduce_scatter(*unchecked);
  check_in_order_completion(*unchecked);
}

}  // namespace
}  // namespace loom::parallel::testing
