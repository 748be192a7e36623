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

// Two chunks per rank: the last rank's activations travel to rank 0 and back.
TEST(DistributedPipelineMpi, InterleavedMatchesSingleDevice) {
  auto [reference, model] = testing::pipeline_models();
  const int p = testing::mpi_world()->size();
  const std::vector<int> cuts = p == 2 ? std::vector<int>{2, 4, 6} : std::vector<int>{1, 2, 3, 5, 6};
  testing::check_pipeline_matches_single_device(
      testing::mpi_world(), reference, model,
      {.kind = ScheduleKind::Interleaved1F1B, .boundaries = cuts, .micro_batches = 2 * p, .chunks = 2});
}

// Activations of 256 KB, past MPI's eager limit: a send then waits for its
// receiver, so a rank whose activation header receive waited for its
// earlier sends would deadlock the ring (docs/comm.md, Semantics). Each
// part is a Linear and a Tanh, 256 wide; the loss is the one of the whole
// model on the last rank.
TEST(DistributedPipelineMpi, InterleavedWithActivationsPastTheEagerLimit) {
  const auto& world = testing::mpi_world();
  const int p = world->size(), r = world->rank();
  manual_seed(9);
  nn::Sequential model;
  std::vector<int> cuts;
  for (int i = 0; i < 2 * p; ++i) {
    if (i > 0) cuts.push_back(2 * i);
    model->push_back(nn::Linear(256, 256));
    model->push_back(nn::Tanh());
  }
  model->to(kFloat64);
  nn::Sequential reference(model->clone());
  const std::vector<nn::ModulePtr> parts = split_sequential(model, cuts);
  DistributedPipeline pipe({parts[r], parts[p + r]}, world,
                           {.micro_batches = 2 * p, .schedule = ScheduleKind::Interleaved1F1B, .chunks = 2});
  Generator gen(3);
  Tensor x = randn({256 * p, 256}, {.dtype = kFloat64}, &gen), y = randn({256 * p, 256}, {.dtype = kFloat64}, &gen);
  auto mse = [](const Tensor& out, const Tensor& target) { return ((out - target) * (out - target)).mean(); };
  Tensor loss = pipe.train_step(x, y, mse);
  if (r == p - 1) {
    NoGradGuard no_grad;
    EXPECT_NEAR(loss.item(), mse(reference->forward(x), y).item(), 1e-12);
  }
}

}  // namespace
}  // namespace loom::parallel
