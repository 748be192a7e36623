// Tensor parallelism over the threads backend: the conjugate operators, each
// layer against its unsharded self, and a GPT over 1, 2 and 4 ranks against
// one device (float64).
#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/tensor_parallel/conjugates.h"
#include "parallel/tensor_parallel/sequence_conjugates.h"
#include "tensor/allocator.h"
#include "tensor/autocast.h"
#include "tests/parallel/tensor_parallel_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using loom::testing::max_rel_error;

// f is the identity forward and sums gradients backward; g the reverse.
TEST(Conjugates, ForwardAndBackwardAsThePaperSays) {
  testing::run_rank_threads(3, [](int rank, const std::shared_ptr<ProcessGroup>& group) {
    Tensor x = full({2}, rank + 1.0, {.dtype = kFloat64}).requires_grad_();
    Tensor f = copy_to_tensor_parallel(x, group);
    loom::testing::expect_values(f, {rank + 1.0, rank + 1.0});
    (f * (rank + 1.0)).sum().backward();  // each rank's own use of x
    loom::testing::expect_values(x.grad(), {6, 6});  // 1 + 2 + 3: every rank's gradient
    Tensor z = full({2}, rank + 1.0, {.dtype = kFloat64}).requires_grad_();
    Tensor g = reduce_from_tensor_parallel(z, group);
    loom::testing::expect_values(g, {6, 6});
    (g * 2).sum().backward();
    loom::testing::expect_values(z.grad(), {2, 2});  // identity backward
    Tensor w = full({1, 2}, rank, {.dtype = kFloat64}).requires_grad_();
    Tensor gathered = gather_from_tensor_parallel(w, group);
    loom::testing::expect_values(gathered, {0, 0, 1, 1, 2, 2});
    (gathered * arange(6, {.dtype = kFloat64})).sum().backward();
    loom::testing::expect_values(w.grad(), {2.0 * rank, 2.0 * rank + 1});
  });
}

// The vocabulary-parallel loss equals cross_entropy on the whole logits, and so do its gradients.
TEST(VocabParallelCrossEntropy, EqualsTheFullLoss) {
  manual_seed(8);
  const Tensor logits = randn({2, 3, 12}, {.dtype = kFloat64}) * 4, targets = randint(0, 12, {2, 3}, {.dtype = kInt64});
  Tensor whole = logits.detach().requires_grad_();
  Tensor expected = nn::functional::cross_entropy(whole.reshape({-1, 12}), targets.reshape({-1}));
  expected.backward();
  testing::run_rank_threads(4, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    Tensor mine = logits.narrow(2, rank * 3, 3).contiguous().requires_grad_();
    Tensor loss = vocab_parallel_cross_entropy(mine, targets, group);
    EXPECT_NEAR(loss.item(), expected.item(), 1e-14);
    loss.backward();
    EXPECT_LT(max_rel_error(mine.grad(), whole.grad().narrow(2, rank * 3, 3)), 1e-12);
  });
}

// Under autocast the loss runs in float32 as cross_entropy does (16-bit
// logits cast up first): the same loss as cross_entropy on the whole 16-bit
// logits to float32's accuracy, not 16-bit exponentials and target logits.
TEST(VocabParallelCrossEntropy, RunsInFloat32UnderAutocast) {
  for (DType low : {kBFloat16, kFloat16}) {
    manual_seed(8);
    const Tensor logits = (randn({4, 5, 12}) * 4).to(low), targets = randint(0, 12, {4, 5}, {.dtype = kInt64});
    AutocastGuard autocast(low);
    Tensor whole = logits.detach().requires_grad_();
    Tensor expected = nn::functional::cross_entropy(whole.reshape({-1, 12}), targets.reshape({-1}));
    expected.backward();
    testing::run_rank_threads(2, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
      AutocastGuard in_this_thread(low);  // autocast is per thread
      Tensor mine = logits.narrow(2, rank * 6, 6).contiguous().requires_grad_();
      Tensor loss = vocab_parallel_cross_entropy(mine, targets, group);
      EXPECT_EQ(loss.dtype(), kFloat32);
      EXPECT_NEAR(loss.item(), expected.item(), 1e-6 * std::abs(expected.item())) << low;
      loss.backward();
      EXPECT_EQ(mine.grad().dtype(), low);
      // The float32 gradients differ in their last bits; rounded to 16 bits, by one unit at most.
      EXPECT_LT(max_rel_error(mine.grad(), whole.grad().narrow(2, rank * 6, 6)), low == kBFloat16 ? 1e-2 : 1e-3) << low;
    });
  }
}

// Sequence parallel: the all-gather's gradient is reduce-scattered, the
// reduce-scatter's all-gathered, each along the sequence (dim 1).
TEST(SequenceConjugates, ForwardAndBackwardAlongTheSequence) {
  testing::run_rank_threads(3, [](int rank, const std::shared_ptr<ProcessGroup>& group) {
    const Tensor positions = arange(12, {.dtype = kFloat64}).reshape({2, 3, 2});  // (B 2, T 3, C 2)
    Tensor mine = full({2, 1, 2}, rank + 1.0, {.dtype = kFloat64}).requires_grad_();
    Tensor all = gather_from_sequence_parallel(mine, group);
    loom::testing::expect_values(all, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
    (all * positions * (rank + 1.0)).sum().backward();  // rank r's use of token j: (r + 1) * positions
    // Token `rank`'s gradient summed over the ranks' uses: 6 * positions[:, rank, :].
    EXPECT_LT(max_rel_error(mine.grad(), positions.narrow(1, rank, 1) * 6), 1e-15);

    Tensor partial = (positions * (rank + 1.0)).requires_grad_();
    Tensor piece = reduce_scatter_to_sequence_parallel(partial, group);
    EXPECT_LT(max_rel_error(piece, positions.narrow(1, rank, 1) * 6), 1e-15);
    (piece * (rank + 1.0)).sum().backward();
    // Token j's gradient comes from rank j: j + 1, on every rank.
    loom::testing::expect_values(partial.grad(), {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  });
}

TEST(SequenceConjugates, ASequenceThatDoesNotDivideIsAnError) {
  testing::run_rank_threads(3, [](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_THROW_MSG(reduce_scatter_to_sequence_parallel(zeros({2, 4, 2}), group),
                     "sequence parallel: the sequence (dim 1 of [2, 4, 2]) does not divide by the 3 ranks");
    EXPECT_THROW_MSG(gather_from_sequence_parallel(zeros({2, 4}), group, 2),
                     "gather_from_sequence_parallel: dimension 2 is out of range for a tensor of 2 dimensions");
    models::GPTConfig config = testing::tp_config();
    config.n_head = 3;
    config.n_embd = 12;
    config.vocab_size = 18;
    models::GPT gpt(config);
    parallelize(*gpt, group, models::gpt_tensor_parallel_plan(/*sequence_parallel=*/true));
    EXPECT_THROW_MSG(gpt->forward(zeros({1, 8}, {.dtype = kInt64})), "does not divide by the 3 ranks");
  });
  testing::run_rank_threads(2, [](int, const std::shared_ptr<ProcessGroup>& group) {
    models::GPT gpt(testing::tp_config());
    parallelize(*gpt, group, models::gpt_tensor_parallel_plan(/*sequence_parallel=*/true));
    EXPECT_THROW_MSG(gpt->forward(zeros({1, 5}, {.dtype = kInt64})), "does not divide by the 2 ranks");
  });
}

struct GptCase {
  int ranks;
  TokenLayout tokens;
};

class TensorParallelGpt : public ::testing::TestWithParam<GptCase> {};

TEST_P(TensorParallelGpt, MatchesSingleDevice) {
  const GptCase c = GetParam();
  testing::run_prepared_ranks<models::GPT>(
      c.ranks, [](int) { return testing::full_gpt(); },
      [&](const std::shared_ptr<ProcessGroup>& group, models::GPT& full) {
        testing::check_tp_gpt_matches_single_device(group, full, c.tokens);
      });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelGpt,
                         ::testing::Values(GptCase{1, TokenLayout::kReplicated}, GptCase{2, TokenLayout::kReplicated},
                                           GptCase{4, TokenLayout::kReplicated},
                                           GptCase{1, TokenLayout::kSequenceSharded},
                                           GptCase{2, TokenLayout::kSequenceSharded},
                                           GptCase{4, TokenLayout::kSequenceSharded}),
                         [](const ::testing::TestParamInfo<GptCase>& info) {
                           return std::to_string(info.param.ranks) +
                                  (info.param.tokens == TokenLayout::kReplicated ? "Ranks" : "RanksSequenceParallel");
                         });

// What one forward keeps for backward, all ranks together (rank threads
// share the CPU allocator): a GPT of 2 blocks, d 64, batch 4 x 32 tokens.
int64_t bytes_kept_for_backward(int ranks, TokenLayout tokens) {
  const models::GPTConfig config{.vocab_size = 16, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 64,
                                 .dropout = 0};
  manual_seed(3);
  models::GPT full(config);
  full->to(kFloat64);  // each rank thread clones it before the count
  const Tensor idx = randint(0, 16, {4, 32}, {.dtype = kInt64}), targets = randint(0, 16, {4, 32}, {.dtype = kInt64});
  int64_t kept = 0;
  testing::run_rank_threads(ranks, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    testing::PlannedGpt tp = testing::tp_gpt(full, group, tokens);
    group->barrier()->wait();
    const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
    group->barrier()->wait();  // no rank starts its forward before the count is read
    Tensor loss = vocab_parallel_cross_entropy(tp.gpt->forward(idx), targets, group);
    group->barrier()->wait();
    if (rank == 0) kept = memory_stats(Device::cpu()).allocated_bytes - before;
    group->barrier()->wait();
    loss.backward();
  });
  return kept;
}

// Sequence parallel keeps 1/N of what sits between the tensor-parallel
// layers: per block the inputs of the two norms and of the two
// column-parallel products (gathered again in backward), and the final
// norm's and the head's: (4 L + 2) activations of (B, T, C) a rank, of
// which it keeps 1/N.
TEST(SequenceParallel, KeepsOneNthOfTheActivationsBetweenTheLayers) {
  const int64_t activation = 4 * 32 * 64 * sizeof(double), ranks = 2;
  const int64_t replicated = bytes_kept_for_backward(ranks, TokenLayout::kReplicated);
  const int64_t sharded = bytes_kept_for_backward(ranks, TokenLayout::kSequenceSharded);
  const double expected_saving = ranks * (4 * 2 + 2) * activation * (1 - 1.0 / ranks);
  std::printf("kept for backward: replicated %lld bytes, sequence sharded %lld; saving %lld, expected %.0f\n",
              static_cast<long long>(replicated), static_cast<long long>(sharded),
              static_cast<long long>(replicated - sharded), expected_saving);
  EXPECT_NEAR(replicated - sharded, expected_saving, 0.1 * expected_saving);
}

// Data x tensor parallel on a 2 x 2 mesh of rank threads, with the tokens
// replicated and sharded along the sequence.
TEST(DataByTensorParallel, TwoByTwoMatchesSingleDevice) {
  for (TokenLayout tokens : {TokenLayout::kReplicated, TokenLayout::kSequenceSharded})
    testing::run_prepared_ranks<models::GPT>(
        4, [](int) { return testing::full_gpt(); },
        [&](const std::shared_ptr<ProcessGroup>& world, models::GPT& full) {
          testing::check_data_x_tensor_parallel_matches_single_device(world, 2, full, tokens);
        });
}

// Rank threads sharing the process's generator would draw different
// dropout masks, so training with dropout over them is refused, naming the
// ways out; evaluation runs.
TEST(TensorParallel, DropoutOverRankThreadsSharingAGeneratorIsAnError) {
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.1;
  testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    models::GPT gpt(config);
    parallelize(*gpt, group, models::gpt_tensor_parallel_plan());
    const Tensor idx = zeros({1, 8}, {.dtype = kInt64});
    EXPECT_THROW_MSG(gpt->forward(idx), "hold a ThreadDefaultGenerator on each rank thread, seeded alike");
    EXPECT_THROW_MSG(gpt->forward(idx), "or run one process per rank (mpirun)");
    gpt->eval();
    EXPECT_EQ(gpt->forward(idx).size(2), 8);
  });
}

// Rank threads that each hold a generator of their own draw as processes
// do: with dropout, both token layouts match one device step by step.
TEST(TensorParallel, DropoutOverRankThreadsWithTheirOwnGeneratorsMatchesSingleDevice) {
  for (TokenLayout tokens : {TokenLayout::kReplicated, TokenLayout::kSequenceSharded}) {
    SCOPED_TRACE(tokens == TokenLayout::kReplicated ? "tokens replicated" : "tokens sequence sharded");
    testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
      ThreadDefaultGenerator own;
      testing::check_tp_gpt_with_dropout_matches_single_device(group, tokens);
    });
  }
}

TEST(TensorParallel, SizesThatDoNotDivideAreErrors) {
  testing::run_rank_threads(3, [](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_THROW_MSG(ParallelSelfAttention(12, 4, group), "the number of attention heads (4) does not divide by the 3 ranks");
    EXPECT_THROW_MSG(VocabParallelEmbedding(16, 4, group), "the vocabulary (16) does not divide by the 3 ranks");
    EXPECT_THROW_MSG(ColumnParallelLinear(4, 8, group), "a column-parallel layer's output features (8)");
    EXPECT_THROW_MSG(RowParallelLinear(8, 4, group), "a row-parallel layer's input features (8)");
  });
}

}  // namespace
}  // namespace loom::parallel
