// DistributedDataParallel over MPI: one process per rank (run by
// mpi_test_runner.sh under mpirun -np 2 and -np 3).
#include <gtest/gtest.h>

#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/mpi_world.h"

namespace loom::parallel {
namespace {

using testing::DdpCase;
using testing::mpi_world;

void expect_matches_single_device(DdpCase c) {
  auto [reference, local] = testing::ddp_models(mpi_world()->rank(), c);
  testing::check_ddp_matches_single_device(mpi_world(), reference, local, c);
}

// Tolerances, and why BatchNorm runs in float64: see ddp_test.cc.
TEST(DistributedDataParallelMpi, MatchesSingleDeviceFloat32) {
  expect_matches_single_device({.dtype = kFloat32, .tolerance = 1e-5});
}
TEST(DistributedDataParallelMpi, BatchNormMatchesSingleDeviceFloat64) {
  expect_matches_single_device({.dtype = kFloat64, .batch_norm = true, .tolerance = 1e-10});
}
TEST(DistributedDataParallelMpi, NoSyncAccumulation) {
  expect_matches_single_device({.dtype = kFloat64, .batch_norm = true, .micro_batches = 2, .tolerance = 1e-10});
}
// With two ranks MPI's 16-bit sum rounds once, as the reference does: the
// same parameters bit for bit. With three it rounds after each combine, in
// an order MPI picks, so a gradient element may differ by an ulp or two of
// 16 bits: up to about 0.02 for these gradients (some reach 3; a bfloat16
// ulp there is 2^-6), which SGD's lr = 0.1 makes 2e-3 a step. The bound
// allows four such steps: this checks the training, not the rounding.
TEST(DistributedDataParallelMpi, CompressedGradientsMatchTheRoundedAverage) {
  for (DType dtype : {kBFloat16, kFloat16}) {
    const DdpCase c{.dtype = kFloat32};
    auto [reference, local] = testing::ddp_models(mpi_world()->rank(), c);
    testing::check_compressed_ddp_matches_rounded_reference(mpi_world(), reference, local, dtype,
                                                            mpi_world()->size() == 2 ? 0 : 1e-2);
  }
}

TEST(DistributedDataParallelMpi, RejectsDifferentModels) { testing::check_ddp_rejects_different_models(mpi_world()); }

}  // namespace
}  // namespace loom::parallel
