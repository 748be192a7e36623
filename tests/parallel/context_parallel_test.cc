// Context parallelism over the threads backend: the attention of a rank's
// queries against hand-built references, and a GPT over 1, 2 and 4 ranks,
// each on its 1/N of every sequence, against one device (float64).
#include <gtest/gtest.h>

#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/ring_attention.h"
#include "parallel/context_parallel/ulysses_attention.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/zero.h"
#include "tests/parallel/context_parallel_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using loom::testing::max_rel_error;

// Both ways a rank gets the other ranks' keys and values.
using CpAttention = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const std::shared_ptr<ProcessGroup>&,
                               SequenceSplit);

class ContextParallelAttention : public ::testing::TestWithParam<CpAttention> {};

// Each rank's output and its q, k, v gradients are its rows of causal
// attention over the whole sequence (the reference: one device), with the
// tokens dealt contiguously and zig-zag.
TEST_P(ContextParallelAttention, EqualsCausalAttentionOverTheWholeSequence) {
  const CpAttention attention = GetParam();
  manual_seed(4);
  const int64_t tokens = 24;
  const Shape shape{2, 12, tokens, 5};  // 12 heads: Ulysses splits them over 1 to 4 ranks
  const Tensor q = randn(shape, {.dtype = kFloat64}), k = randn(shape, {.dtype = kFloat64}),
               v = randn(shape, {.dtype = kFloat64}), weights = randn(shape, {.dtype = kFloat64});
  Tensor wq = q.detach().requires_grad_(), wk = k.detach().requires_grad_(), wv = v.detach().requires_grad_();
  const Tensor whole = nn::functional::scaled_dot_product_attention(wq, wk, wv, /*causal=*/true);
  (whole * weights).sum().backward();
  for (SequenceSplit split : {SequenceSplit::kContiguous, SequenceSplit::kZigZag}) {
    for (int ranks : {1, 2, 3, 4}) {
      testing::run_rank_threads(ranks, [&](int, const std::shared_ptr<ProcessGroup>& group) {
        auto mine = [&](const Tensor& t) { return shard_sequence(t, *group, split, 2); };
        Tensor mq = mine(q).contiguous().requires_grad_(), mk = mine(k).contiguous().requires_grad_(),
               mv = mine(v).contiguous().requires_grad_();
        const Tensor out = attention(mq, mk, mv, group, split);
        const std::string where = std::to_string(ranks) + " ranks, split " + std::to_string(static_cast<int>(split));
        EXPECT_LT(max_rel_error(out, mine(whole.detach())), 1e-12) << where;
        (out * mine(weights)).sum().backward();
        EXPECT_LT(max_rel_error(mq.grad(), mine(wq.grad())), 1e-12) << where;
        // Later tokens' uses of this rank's keys and values come back to it (reduce-scatter or ring).
        EXPECT_LT(max_rel_error(mk.grad(), mine(wk.grad())), 1e-12) << where;
        EXPECT_LT(max_rel_error(mv.grad(), mine(wv.grad())), 1e-12) << where;
      });
    }
  }
}

TEST_P(ContextParallelAttention, MismatchedShapesAreErrors) {
  const CpAttention attention = GetParam();
  testing::run_rank_threads(1, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_THROW_MSG(attention(zeros({1, 2, 4, 3}), zeros({1, 2, 5, 3}), zeros({1, 2, 4, 3}), group,
                               SequenceSplit::kContiguous),
                     "expected q, k, v of one shape (B, H, T/N, D)");
  });
}

INSTANTIATE_TEST_SUITE_P(Exchanges, ContextParallelAttention,
                         ::testing::Values(&context_parallel_attention, &ring_attention, &ulysses_attention),
                         [](const ::testing::TestParamInfo<CpAttention>& info) {
                           return info.param == &ring_attention      ? "Ring"
                                  : info.param == &ulysses_attention ? "AllToAll"
                                                                     : "AllGather";
                         });

// Zig-zag deals rank r the chunks r and 2N-1-r; the positions say so.
TEST(SequenceSplit, ZigZagDealsAnEarlyAndALateChunk) {
  testing::run_rank_threads(2, [](int rank, const std::shared_ptr<ProcessGroup>& group) {
    const Tensor sequence = arange(8, {.dtype = kInt64}).reshape({1, 8});
    const std::vector<int64_t> expected = rank == 0 ? std::vector<int64_t>{0, 1, 6, 7} : std::vector<int64_t>{2, 3, 4, 5};
    EXPECT_EQ(shard_sequence(sequence, *group, SequenceSplit::kZigZag).to_vector<int64_t>(), expected);
    EXPECT_EQ(sequence_positions(4, *group, SequenceSplit::kZigZag, Device::cpu()).to_vector<int64_t>(), expected);
    EXPECT_EQ(shard_sequence(sequence, *group, SequenceSplit::kContiguous).to_vector<int64_t>(),
              rank == 0 ? std::vector<int64_t>({0, 1, 2, 3}) : std::vector<int64_t>({4, 5, 6, 7}));
    EXPECT_THROW_MSG(shard_sequence(zeros({1, 6}), *group, SequenceSplit::kZigZag),
                     "6 tokens do not split into two chunks for each of 2 ranks");
  });
}

// A rank whose block differs from its neighbour's is told so by the
// receive, on both ranks, instead of reading past a buffer or hanging.
TEST(RingAttention, RanksWithBlocksOfDifferentSizesFailClearly) {
  testing::run_rank_threads(2, [](int rank, const std::shared_ptr<ProcessGroup>& group) {
    const Tensor x = zeros({1, 2, rank == 0 ? 4 : 6, 3});
    EXPECT_THROW_MSG(ring_attention(x, x, x, group), "but this recv expects");
  });
}

// bfloat16 inputs (4 ranks, zig-zag), against float32 attention over the
// whole sequence of the same rounded values. The blocks merge in float32
// and the output rounds once: here within 5.1e-3 of the reference, where
// merging in bfloat16 gives 1.03e-2, so the bound 7.5e-3 tells the two
// apart. The gradients, computed block by block in bfloat16, within 3e-2.
TEST(RingAttention, BFloat16StaysWithinARoundingOfFloat32) {
  Generator gen(8);
  auto bf16_values = [&] { return randn({1, 2, 32, 8}, {}, &gen).to(kBFloat16).to(kFloat32); };
  const Tensor q = bf16_values(), k = bf16_values(), v = bf16_values(), weights = randn({1, 2, 32, 8}, {}, &gen);
  Tensor wq = q.clone().requires_grad_(), wk = k.clone().requires_grad_(), wv = v.clone().requires_grad_();
  const Tensor whole = nn::functional::scaled_dot_product_attention(wq, wk, wv, /*causal=*/true);
  (whole * weights).sum().backward();
  testing::run_rank_threads(4, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    auto mine = [&](const Tensor& t) { return shard_sequence(t, *group, SequenceSplit::kZigZag, 2).contiguous(); };
    Tensor mq = mine(q).to(kBFloat16).requires_grad_(), mk = mine(k).to(kBFloat16).requires_grad_(),
           mv = mine(v).to(kBFloat16).requires_grad_();
    const Tensor out = ring_attention(mq, mk, mv, group, SequenceSplit::kZigZag);
    EXPECT_EQ(out.dtype(), kBFloat16);
    EXPECT_LT(max_rel_error(out.to(kFloat32), mine(whole.detach())), 7.5e-3);
    (out.to(kFloat32) * mine(weights)).sum().backward();
    EXPECT_EQ(mk.grad().dtype(), kBFloat16);
    EXPECT_LT(max_rel_error(mq.grad().to(kFloat32), mine(wq.grad())), 3e-2);
    EXPECT_LT(max_rel_error(mk.grad().to(kFloat32), mine(wk.grad())), 3e-2);
    EXPECT_LT(max_rel_error(mv.grad().to(kFloat32), mine(wv.grad())), 3e-2);
  });
}

// Ulysses splits the heads over the ranks: heads that do not divide are refused, on every rank, before any message.
TEST(UlyssesAttention, HeadsThatDoNotSplitOverTheRanksAreErrors) {
  testing::run_rank_threads(2, [](int, const std::shared_ptr<ProcessGroup>& group) {
    const Tensor x = zeros({1, 3, 4, 2});
    EXPECT_THROW_MSG(ulysses_attention(x, x, x, group), "3 heads do not split over 2 ranks");
  });
}

struct CpCase {
  int ranks;
  SequenceSplit split;
  KeyValueExchange exchange = KeyValueExchange::kAllGather;
};

class ContextParallelGpt : public ::testing::TestWithParam<CpCase> {};

TEST_P(ContextParallelGpt, MatchesSingleDevice) {
  const CpCase c = GetParam();
  testing::run_prepared_ranks<testing::ReferenceAndCopy>(
      c.ranks, [](int) { return testing::reference_and_copy(); },
      [&](const std::shared_ptr<ProcessGroup>& group, testing::ReferenceAndCopy& models) {
        testing::check_cp_gpt_matches_single_device(group, models, c.split, /*reseed=*/false, c.exchange);
      });
}

constexpr auto kRing = KeyValueExchange::kRing;
constexpr auto kAllToAll = KeyValueExchange::kAllToAll;

INSTANTIATE_TEST_SUITE_P(Ranks, ContextParallelGpt,
                         ::testing::Values(CpCase{1, SequenceSplit::kContiguous}, CpCase{2, SequenceSplit::kContiguous},
                                           CpCase{4, SequenceSplit::kContiguous}, CpCase{2, SequenceSplit::kZigZag},
                                           CpCase{4, SequenceSplit::kZigZag},
                                           CpCase{1, SequenceSplit::kContiguous, kRing},
                                           CpCase{4, SequenceSplit::kContiguous, kRing},
                                           CpCase{2, SequenceSplit::kZigZag, kRing},
                                           CpCase{4, SequenceSplit::kZigZag, kRing},
                                           CpCase{2, SequenceSplit::kContiguous, kAllToAll},
                                           CpCase{4, SequenceSplit::kZigZag, kAllToAll}),
                         [](const ::testing::TestParamInfo<CpCase>& info) {
                           return std::to_string(info.param.ranks) +
                                  (info.param.split == SequenceSplit::kZigZag ? "RanksZigZag" : "Ranks") +
                                  (info.param.exchange == kRing       ? "Ring"
                                   : info.param.exchange == kAllToAll ? "AllToAll"
                                                                      : "");
                         });

// Context parallelism with sharded data parallelism in place of DDP: the
// weights' gradients reduce-scattered as backward goes (ZeRO-2), or the
// model one FSDP unit, or one unit per block (context parallelism changes
// the model's own modules, so FSDP may wrap them), gathered for each pass. Two ranks, zig-zag, ring
// attention; three AdamW steps against the GPT on whole sequences: the
// ranks' mean loss each step and every weight after.
enum class Sharding { kZero2, kFsdp, kFsdpPerBlock };

class ContextParallelSharded : public ::testing::TestWithParam<Sharding> {};

TEST_P(ContextParallelSharded, MatchesSingleDevice) {
  const Sharding sharding = GetParam();
  testing::run_prepared_ranks<testing::ReferenceAndCopy>(
      2, [](int) { return testing::reference_and_copy(); },
      [&](const std::shared_ptr<ProcessGroup>& group, testing::ReferenceAndCopy& models) {
        auto& [full, copy] = models;
        context_parallel(*copy, group, models::gpt_context_parallel({.split = SequenceSplit::kZigZag, .exchange = kRing}));
        FullyShardedDataParallel fsdp{nullptr};
        std::unique_ptr<optim::Optimizer> opt;
        if (sharding != Sharding::kZero2) {
          // One unit for the whole model, or one per block: the blocks run their own modules.
          fsdp = sharding == Sharding::kFsdp
                     ? FullyShardedDataParallel(copy.ptr(), group)
                     : FullyShardedDataParallel(copy.ptr(), group, {.wrap = wrap_type<models::BlockImpl>()});
          opt = std::make_unique<optim::AdamW>(fsdp->parameters(), optim::AdamOptions{.lr = 1e-2});
        } else {
          opt = std::make_unique<ZeroRedundancyOptimizer>(
              copy->parameters(), group,
              [](TensorList shard) { return std::make_unique<optim::AdamW>(shard, optim::AdamOptions{.lr = 1e-2}); },
              ZeroOptions{.stage = 2});
        }
        Generator gen(5);
        const Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen),
                     targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen);
        const Tensor my_idx = shard_sequence(idx, *group, SequenceSplit::kZigZag),
                     my_targets = shard_sequence(targets, *group, SequenceSplit::kZigZag);
        optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
        for (int step = 0; step < 3; ++step) {
          opt_full.zero_grad();
          Tensor expected = nn::functional::cross_entropy(full->forward(idx).reshape({-1, 16}), targets.reshape({-1}));
          expected.backward();
          opt_full.step();
          opt->zero_grad();
          const Tensor logits = fsdp ? fsdp->forward(my_idx) : copy->forward(my_idx);
          Tensor loss = nn::functional::cross_entropy(logits.reshape({-1, 16}), my_targets.reshape({-1}));
          loss.backward();
          opt->step();
          EXPECT_NEAR(testing::mean_over(*group, loss), expected.item(), 1e-12) << "step " << step;
        }
        const nn::StateDict mine = fsdp ? fsdp->full_state_dict() : copy->state_dict();
        const nn::StateDict reference = full->state_dict();
        ASSERT_EQ(mine.size(), reference.size());
        for (const auto& [name, value] : mine) {
          const auto expected = std::find_if(reference.begin(), reference.end(),
                                             [&](const auto& entry) { return entry.first == name; });
          ASSERT_NE(expected, reference.end()) << name;
          EXPECT_LT(loom::testing::max_rel_error(value, expected->second), 1e-10) << name;
        }
      });
}

INSTANTIATE_TEST_SUITE_P(Shardings, ContextParallelSharded,
                         ::testing::Values(Sharding::kZero2, Sharding::kFsdp, Sharding::kFsdpPerBlock),
                         [](const ::testing::TestParamInfo<Sharding>& info) {
                           return info.param == Sharding::kFsdp           ? "Fsdp"
                                  : info.param == Sharding::kFsdpPerBlock ? "FsdpPerBlock"
                                                                          : "Zero2";
                         });

struct MeshCase {
  int context, tensor;
  SequenceSplit split;
  KeyValueExchange exchange;
};

class ContextTensorParallelGpt : public ::testing::TestWithParam<MeshCase> {};

// C x T rank threads: tensor parallel over T, context parallel over C.
TEST_P(ContextTensorParallelGpt, MatchesSingleDevice) {
  const MeshCase c = GetParam();
  testing::run_prepared_ranks<models::GPT>(
      c.context * c.tensor, [](int) { return testing::full_gpt(); },
      [&](const std::shared_ptr<ProcessGroup>& world, models::GPT& full) {
        testing::check_context_x_tensor_parallel_matches_single_device(world, full, c.context, c.split, c.exchange);
      });
}

INSTANTIATE_TEST_SUITE_P(
    Meshes, ContextTensorParallelGpt,
    ::testing::Values(MeshCase{2, 2, SequenceSplit::kContiguous, KeyValueExchange::kAllGather},
                      MeshCase{2, 2, SequenceSplit::kZigZag, kRing}, MeshCase{1, 2, SequenceSplit::kZigZag, kRing},
                      MeshCase{2, 1, SequenceSplit::kZigZag, KeyValueExchange::kAllGather},
                      MeshCase{2, 4, SequenceSplit::kContiguous, kRing},
                      MeshCase{2, 2, SequenceSplit::kZigZag, kAllToAll}),
    [](const ::testing::TestParamInfo<MeshCase>& info) {
      const MeshCase& c = info.param;
      return "Context" + std::to_string(c.context) + "Tensor" + std::to_string(c.tensor) +
             (c.split == SequenceSplit::kZigZag ? "ZigZag" : "") +
             (c.exchange == kRing ? "Ring" : c.exchange == kAllToAll ? "AllToAll" : "");
    });

// With dropout, each rank thread holding a generator seeded alike: every
// rank draws the whole sequence's masks, as one device does.
TEST(ContextTensorParallelGpt, DropoutOverRankThreadsWithTheirOwnGeneratorsMatchesSingleDevice) {
  testing::run_rank_threads(4, [&](int, const std::shared_ptr<ProcessGroup>& world) {
    ThreadDefaultGenerator own;
    models::GPTConfig config = testing::tp_config();
    config.dropout = 0.2;
    models::GPT full = testing::full_gpt(Device::cpu(), config);  // seeds this thread's own generator
    testing::check_context_x_tensor_parallel_matches_single_device(world, full, 2, SequenceSplit::kZigZag, kRing);
  });
}

TEST(ContextTensorParallelGpt, SequenceShardedTensorParallelAndDropoutOverSharedGeneratorsAreErrors) {
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.1;
  testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    const std::shared_ptr<ProcessGroup> alone = group->split(group->rank());  // a tensor group of one
    models::GPT sharded(config);
    parallelize(*sharded, alone, models::gpt_tensor_parallel_plan(/*sequence_parallel=*/true));
    EXPECT_THROW_MSG(context_parallel(*sharded, group, models::gpt_context_parallel()),
                     "already runs sequence_parallel over 1 ranks; context parallelism cannot also apply to it");
    models::GPT cp_tp(config);
    parallelize(*cp_tp, alone, models::gpt_tensor_parallel_plan());
    context_parallel(*cp_tp, group, models::gpt_context_parallel());
    EXPECT_THROW_MSG(cp_tp->forward(zeros({1, 5}, {.dtype = kInt64})),
                     "sequences of 10 tokens over 2 context ranks, beyond the 8 positions");
    EXPECT_THROW_MSG(cp_tp->forward(zeros({1, 4}, {.dtype = kInt64})), "hold a ThreadDefaultGenerator");
  });
}

TEST(ContextParallelGpt, SequencesLongerThanTheBlockAndDropoutOverThreadsAreErrors) {
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.1;
  testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    models::GPT cp(config);
    context_parallel(*cp, group, models::gpt_context_parallel());
    EXPECT_THROW_MSG(cp->forward(zeros({1, 5}, {.dtype = kInt64})),
                     "sequences of 10 tokens over 2 context ranks, beyond the 8 positions");
    models::GPT zigzag(testing::tp_config());
    context_parallel(*zigzag, group, models::gpt_context_parallel({.split = SequenceSplit::kZigZag}));
    EXPECT_THROW_MSG(zigzag->forward(zeros({1, 3}, {.dtype = kInt64})),
                     "a rank's 3 tokens do not make two equal chunks");
    EXPECT_THROW_MSG(cp->forward(zeros({1, 4}, {.dtype = kInt64})), "hold a ThreadDefaultGenerator on each rank thread");
    cp->eval();
    EXPECT_EQ(cp->forward(zeros({1, 4}, {.dtype = kInt64})).size(1), 4);
  });
}

// Rank threads each holding a generator of their own, seeded alike, draw
// the dropout masks one device draws over the whole sequence (zig-zag).
TEST(ContextParallelGpt, DropoutOverRankThreadsWithTheirOwnGeneratorsMatchesSingleDevice) {
  models::GPTConfig config = testing::tp_config();
  config.dropout = 0.2;
  testing::run_rank_threads(2, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    ThreadDefaultGenerator own;
    testing::ReferenceAndCopy models = testing::reference_and_copy(config);
    testing::check_cp_gpt_matches_single_device(group, models, SequenceSplit::kZigZag, /*reseed=*/true);
  });
}

}  // namespace
}  // namespace loom::parallel
