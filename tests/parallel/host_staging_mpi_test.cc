// HostStagedGroup over MPI: two processes sharing one GPU (run by
// mpi_test_runner.sh under mpirun -np 2), the setup NCCL refuses. Skips
// without a GPU.
#include <gtest/gtest.h>

#include "parallel/comm/host_staged_group.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/pipeline_checks.h"
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

// Sends and receives finish on their own through the staging too (the
// interleaved pipeline's ring needs it): CPU tensors pass through the staged
// loops as they are, so this runs without a GPU; CUDA ones are staged.
TEST(HostStagedMpi, ReceiveDoesNotWaitForAnEarlierSend) {
  testing::check_receive_does_not_wait_for_an_earlier_send(*staged_world());
}

// The interleaved pipeline's ring through the staging (CPU tensors here).
TEST(HostStagedMpi, InterleavedPipelineWithActivationsPastTheEagerLimit) {
  testing::check_interleaved_with_large_activations(staged_world());
}

TEST(HostStagedMpi, ReceiveOfCudaTensorsDoesNotWaitForAnEarlierSend) {
  LOOM_REQUIRE_CUDA();
  testing::check_receive_does_not_wait_for_an_earlier_send(*staged_world(), Device::cuda(0));
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
