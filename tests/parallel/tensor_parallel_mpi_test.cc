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

// Data x tensor parallel: a 2 x 1 mesh under -np 2, 2 x 2 under -np 4.
TEST(TensorParallelMpi, DataByTensorParallelMatchesSingleDevice) {
  testing::check_data_x_tensor_parallel_matches_single_device(testing::mpi_world(), 2, testing::full_gpt(),
                                                              TokenLayout::kSequenceSharded);
}

TEST(TensorParallelMpi, SequenceParallelGptMatchesSingleDevice) {
  testing::check_tp_gpt_matches_single_device(testing::mpi_world(), testing::full_gpt(), TokenLayout::kSequenceSharded);
}

// Dropout: every rank of its own process draws the unsharded GPT's masks.
TEST(TensorParallelMpi, GptWithDropoutMatchesSingleDevice) {
  testing::check_tp_gpt_with_dropout_matches_single_device(testing::mpi_world(), TokenLayout::kReplicated);
}

TEST(TensorParallelMpi, SequenceParallelGptWithDropoutMatchesSingleDevice) {
  testing::check_tp_gpt_with_dropout_matches_single_device(testing::mpi_world(), TokenLayout::kSequenceSharded);
}

}  // namespace
}  // namespace loom::parallel
