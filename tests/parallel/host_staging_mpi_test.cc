// HostStagedGroup over MPI: two processes sharing one GPU (run by
// mpi_test_runner.sh under mpirun -np 2), the setup NCCL refuses. Skips
// without a GPU.
#include <gtest/gtest.h>

#include "parallel/comm/host_staged_group.h"
#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/mpi_world.h"
#include "tests/parallel/staging_checks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

using testing::mpi_world;

std::shared_ptr<ProcessGroup> staged_world() {
  static std::shared_ptr<ProcessGroup> staged = HostStagedGroup::wrap(mpi_world());
  return staged;
}

TEST(HostStagedMpi, CudaTensorsGiveTheCpuResults) {
  LOOM_REQUIRE_CUDA();
  testing::check_staged_cuda_matches_cpu(*staged_world());
}

TEST(HostStagedMpi, DdpOnCudaMatchesOneDevice) {
  LOOM_REQUIRE_CUDA();
  testing::DdpCase c{.dtype = kFloat64, .batch_norm = true, .micro_batches = 2, .tolerance = 1e-10,
                     .device = Device::cuda(0)};
  auto [reference, local] = testing::ddp_models(mpi_world()->rank(), c);
  testing::check_ddp_matches_single_device(staged_world(), reference, local, c);
}

}  // namespace
}  // namespace loom::parallel
