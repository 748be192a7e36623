// Tensor parallelism over MPI: the GPT split over the processes of mpirun
// -np 2 and -np 4 against one device, with the tokens replicated and with
// them sharded along the sequence.
#include <gtest/gtest.h>

#include "tests/parallel/mpi_world.h"
#include "tests/parallel/tensor_parallel_checks.h"

namespace loom::parallel {
namespace {

TEST(TensorParallelMpi, GptMatchesSingleDevice) {
  testing::check_tp_gpt_matches_single_device(testing::mpi_world(), testing::full_gpt());
}

TEST(TensorParallelMpi, SequenceParallelGptMatchesSingleDevice) {
  testing::check_tp_gpt_matches_single_device(testing::mpi_world(), testing::full_gpt(), TokenLayout::kSequenceSharded);
}

}  // namespace
}  // namespace loom::parallel
