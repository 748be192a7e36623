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

// The keys and values passed round the ring of processes, both splits.
TEST(ContextParallelMpi, RingAttentionGptMatchesSingleDevice) {
  for (SequenceSplit split : {SequenceSplit::kContiguous, SequenceSplit::kZigZag}) {
    testing::ReferenceAndCopy models = testing::reference_and_copy();
    testing::check_cp_gpt_matches_single_device(testing::mpi_world(), models, split, /*reseed=*/false,
                                                KeyValueExchange::kRing);
  }
}

}  // namespace
}  // namespace loom::parallel
