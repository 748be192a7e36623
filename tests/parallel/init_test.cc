// A program started without mpirun runs as a single rank.
#include <cstdlib>

#include "parallel/comm/init.h"
#include "tests/parallel/collective_checks.h"

namespace loom::parallel::testing {
namespace {

TEST(Init, WithoutMpirunIsOneRank) {
  ASSERT_FALSE(launched_by_mpi()) << "this test must run outside mpirun";
  int argc = 1;
  char name[] = "init_test";
  char* args[] = {name, nullptr};
  char** argv = args;
  auto pg = init(argc, argv);
  EXPECT_EQ(pg->rank(), 0);
  EXPECT_EQ(pg->size(), 1);
  EXPECT_EQ(pg->local_rank(), 0);
  EXPECT_EQ(pg->backend(), "threads");
  EXPECT_EQ(local_rank(), 0);
  EXPECT_EQ(argc, 1);

  // Collectives are the identity on one rank.
  Tensor t = from_vector<float>({1, 2, 3});
  pg->all_reduce(t, ReduceOp::Avg)->wait();
  expect_values(t, {1, 2, 3});
  Tensor out = zeros({3});
  pg->all_gather(out, t)->wait();
  expect_values(out, {1, 2, 3});
  pg->barrier()->wait();
}

TEST(Init, ReadsTheLaunchersEnvironment) {
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1), 0);
  EXPECT_EQ(local_rank(), 3);
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1), 0);
  EXPECT_THROW_MSG(local_rank(), "local_rank: OMPI_COMM_WORLD_LOCAL_RANK='x' is not a rank");
  ASSERT_EQ(unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"), 0);
  ASSERT_EQ(setenv("SLURM_LOCALID", "2", 1), 0);
  EXPECT_EQ(local_rank(), 2);
  ASSERT_EQ(unsetenv("SLURM_LOCALID"), 0);

  EXPECT_FALSE(launched_by_mpi());
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_SIZE", "4", 1), 0);
  EXPECT_TRUE(launched_by_mpi());
  ASSERT_EQ(unsetenv("OMPI_COMM_WORLD_SIZE"), 0);
}

}  // namespace
}  // namespace loom::parallel::testing
