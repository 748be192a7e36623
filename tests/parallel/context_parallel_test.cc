// Context parallelism over the threads backend: the attention of a rank's
// queries against hand-built references, and a GPT over 1, 2 and 4 ranks,
// each on its 1/N of every sequence, against one device (float64).
#include <gtest/gtest.h>

#include "parallel/context_parallel/attention.h"
#include "tests/parallel/context_parallel_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using loom::testing::max_rel_error;

// Each rank's output and its q, k, v gradients are its rows of causal
// attention over the whole sequence (the reference: one device).
TEST(ContextParallelAttention, EqualsCausalAttentionOverTheWholeSequence) {
  manual_seed(4);
  const int64_t tokens = 12;
  const Tensor q = randn({2, 3, tokens, 5}, {.dtype = kFloat64}), k = randn({2, 3, tokens, 5}, {.dtype = kFloat64}),
               v = randn({2, 3, tokens, 5}, {.dtype = kFloat64}), weights = randn({2, 3, tokens, 5}, {.dtype = kFloat64});
  Tensor wq = q.detach().requires_grad_(), wk = k.detach().requires_grad_(), wv = v.detach().requires_grad_();
  const Tensor whole = nn::functional::scaled_dot_product_attention(wq, wk, wv, /*causal=*/true);
  (whole * weights).sum().backward();
  for (int ranks : {1, 2, 3, 4}) {
    testing::run_rank_threads(ranks, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
      const int64_t piece = tokens / ranks, first = rank * piece;
      auto mine = [&](const Tensor& t) { return t.narrow(2, first, piece).contiguous().requires_grad_(); };
      Tensor mq = mine(q), mk = mine(k), mv = mine(v);
      const Tensor out = context_parallel_attention(mq, mk, mv, group);
      EXPECT_LT(max_rel_error(out, whole.detach().narrow(2, first, piece)), 1e-12) << ranks << " ranks";
      (out * weights.narrow(2, first, piece)).sum().backward();
      EXPECT_LT(max_rel_error(mq.grad(), wq.grad().narrow(2, first, piece)), 1e-12) << ranks << " ranks";
      // Later ranks' uses of this rank's keys and values arrive through the reduce-scatter.
      EXPECT_LT(max_rel_error(mk.grad(), wk.grad().narrow(2, first, piece)), 1e-12) << ranks << " ranks";
      EXPECT_LT(max_rel_error(mv.grad(), wv.grad().narrow(2, first, piece)), 1e-12) << ranks << " ranks";
    });
  }
}

TEST(ContextParallelAttention, MismatchedShapesAreErrors) {
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_THROW_MSG(context_parallel_attention(zeros({1, 2, 4, 3}), zeros({1, 2, 5, 3}), zeros({1, 2, 4, 3}), group),
                     "expected q, k, v of one shape (B, H, T/N, D)");
  });
}

class ContextParallelGpt : public ::testing::TestWithParam<int> {};

TEST_P(ContextParallelGpt, MatchesSingleDevice) {
  testing::run_prepared_ranks<testing::ReferenceAndCopy>(
      GetParam(), [](int) { return testing::reference_and_copy(); },
      [](const std::shared_ptr<ProcessGroup>& group, testing::ReferenceAndCopy& models) {
        testing::check_cp_gpt_matches_single_device(group, models);
      });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ContextParallelGpt, ::testing::Values(1, 2, 4),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param) + "Ranks"; });

TEST(ContextParallelGpt, SequencesLongerThanTheBlockAndDropoutOverThreadsAreErrors) {
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.1;
  testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    models::ContextParallelGPT cp(models::GPT(config), group);
    EXPECT_THROW_MSG(cp->forward(zeros({1, 5}, {.dtype = kInt64})), "of sequences of T <= 8 over 2 ranks");
    EXPECT_THROW_MSG(cp->forward(zeros({1, 4}, {.dtype = kInt64})), "needs one process per rank (mpirun)");
    cp->eval();
    EXPECT_EQ(cp->forward(zeros({1, 4}, {.dtype = kInt64})).size(1), 4);
  });
}

}  // namespace
}  // namespace loom::parallel
