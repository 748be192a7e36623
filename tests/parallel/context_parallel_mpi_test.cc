// Context parallelism over MPI: the GPT with each of mpirun -np 2 and -np 4
// processes on its 1/N of every sequence (contiguous and zig-zag), against
// one device, without and with dropout (each process draws the whole
// sequence's masks and applies its tokens' part), and with ring attention.
#include <gtest/gtest.h>

#include "tests/parallel/context_parallel_checks.h"
#include "tests/parallel/mpi_world.h"

namespace loom::parallel {
namespace {

TEST(ContextParallelMpi, GptMatchesSingleDevice) {
  testing::ReferenceAndCopy models = testing::reference_and_copy();
  testing::check_cp_gpt_matches_single_device(testing::mpi_world(), models, SequenceSplit::kContiguous);
}

TEST(ContextParallelMpi, ZigZagGptMatchesSingleDevice) {
  testing::ReferenceAndCopy models = testing::reference_and_copy();
  testing::check_cp_gpt_matches_single_device(testing::mpi_world(), models, SequenceSplit::kZigZag);
}

TEST(ContextParallelMpi, GptWithDropoutMatchesSingleDevice) {
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.2;
  testing::ReferenceAndCopy models = testing::reference_and_copy(config);
  testing::check_cp_gpt_matches_single_device(testing::mpi_world(), models, SequenceSplit::kZigZag, /*reseed=*/true);
}

// The keys and values passed round the ring of processes, and the heads
// split by all-to-alls (Ulysses), both splits.
TEST(ContextParallelMpi, RingAndAllToAllGptsMatchSingleDevice) {
  for (KeyValueExchange exchange : {KeyValueExchange::kRing, KeyValueExchange::kAllToAll})
    for (SequenceSplit split : {SequenceSplit::kContiguous, SequenceSplit::kZigZag}) {
      testing::ReferenceAndCopy models = testing::reference_and_copy();
      testing::check_cp_gpt_matches_single_device(testing::mpi_world(), models, split, /*reseed=*/false, exchange);
    }
}

// Context x tensor parallel over the processes: 2 x 1 under -np 2, 2 x 2 under -np 4.
TEST(ContextParallelMpi, ContextByTensorParallelGptMatchesSingleDevice) {
  models::GPT full = testing::full_gpt();
  testing::check_context_x_tensor_parallel_matches_single_device(testing::mpi_world(), full, 2, SequenceSplit::kZigZag,
                                                                 KeyValueExchange::kRing);
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.2;  // every process draws the one device's masks
  models::GPT with_dropout = testing::full_gpt(Device::cpu(), config);
  testing::check_context_x_tensor_parallel_matches_single_device(testing::mpi_world(), with_dropout, 2,
                                                                 SequenceSplit::kContiguous, KeyValueExchange::kAllGather);
}

}  // namespace
}  // namespace loom::parallel
