// NcclGroup over processes (mpi_test_runner.sh runs it under mpirun -np 2),
// each rank on its own GPU, cuda:<local rank>: every operation gives the
// CPU's result, and DDP over NCCL trains as one device. Skips, on every
// rank alike, where the machine has fewer GPUs than ranks.
#include <gtest/gtest.h>

#include "parallel/comm/init.h"
#include "parallel/comm/nccl_group.h"
#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/mpi_world.h"
#include "tests/parallel/staging_checks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

using testing::mpi_world;

Device my_gpu() { return Device::cuda(local_rank()); }

std::shared_ptr<ProcessGroup> nccl_world() {
  static std::shared_ptr<ProcessGroup> nccl = NcclGroup::create(mpi_world(), my_gpu());
  return nccl;
}

#define REQUIRE_A_GPU_PER_RANK()                                                                             \
  do {                                                                                                       \
    if (cuda_device_count() < mpi_world()->size())                                                           \
      GTEST_SKIP() << "needs a GPU per rank (" << mpi_world()->size() << "); this machine has "              \
                   << cuda_device_count();                                                                   \
  } while (0)

TEST(NcclMpi, CudaTensorsGiveTheCpuResults) {
  REQUIRE_A_GPU_PER_RANK();
  testing::check_cuda_matches_cpu(*nccl_world(), my_gpu());
}

TEST(NcclMpi, DdpMatchesOneDevice) {
  REQUIRE_A_GPU_PER_RANK();
  testing::DdpCase c{.dtype = kFloat64, .batch_norm = true, .micro_batches = 2, .tolerance = 1e-10,
                     .device = my_gpu()};
  auto [reference, local] = testing::ddp_models(mpi_world()->rank(), c);
  testing::check_ddp_matches_single_device(nccl_world(), reference, local, c);
}

}  // namespace
}  // namespace loom::parallel
