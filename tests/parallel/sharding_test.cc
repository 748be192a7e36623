// Sharded data parallelism over the threads backend: every strategy equals
// single-device training step after step, for 1, 2 and 3 ranks.
#include <gtest/gtest.h>

#include "tests/parallel/sharding_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

using testing::ShardCase;

struct Models {
  nn::ModulePtr reference, local;
};

void expect_zero_matches_single_device(int world, ShardCase c) {
  testing::run_prepared_ranks<Models>(
      world,
      [](int rank) {
        auto [reference, local] = testing::sharded_models(rank);
        return Models{reference, local};
      },
      [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
        testing::check_zero_matches_single_device(group, m.reference, m.local, c);
      });
}

class ZeroTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroTest, Stage1MatchesSingleDevice) { expect_zero_matches_single_device(GetParam(), {.stage = 1}); }
TEST_P(ZeroTest, Stage2MatchesSingleDevice) { expect_zero_matches_single_device(GetParam(), {.stage = 2}); }
// Small buckets: many reduce-scatters, stage 2's in flight two at a time, some pieces of a few elements.
TEST_P(ZeroTest, Stage1SmallBuckets) {
  expect_zero_matches_single_device(GetParam(), {.stage = 1, .bucket_cap_bytes = 512});
}
TEST_P(ZeroTest, Stage2SmallBuckets) {
  expect_zero_matches_single_device(GetParam(), {.stage = 2, .bucket_cap_bytes = 512});
}
TEST_P(ZeroTest, Stage1AccumulatesGradients) {
  expect_zero_matches_single_device(GetParam(), {.stage = 1, .bucket_cap_bytes = 2048, .micro_batches = 3});
}
TEST_P(ZeroTest, Stage2RejectsASecondBackward) {
  testing::run_rank_threads(GetParam(), [](int, const std::shared_ptr<ProcessGroup>& group) {
    testing::check_zero2_rejects_a_second_backward(group);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroTest, ::testing::Values(1, 2, 3));

// One rank: the allocator sees exactly what the rank holds.
TEST(ZeroMemory, OneRankMatchesTheModel) {
  for (int stage : {1, 2})
    testing::run_rank_threads(1, [stage](int, const std::shared_ptr<ProcessGroup>& group) {
      testing::check_zero_memory(group, stage);
    });
}

TEST(Zero, RejectsBadOptions) {
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    nn::Linear net(2, 2);
    EXPECT_THROW_MSG(ZeroRedundancyOptimizer(net->parameters(), group, testing::make_adamw, {.stage = 3}),
                     "stage must be 1 or 2, got 3 (FSDP shards the parameters too)");
    EXPECT_THROW_MSG(ZeroRedundancyOptimizer(net->parameters(), nullptr, testing::make_adamw), "no process group");
    EXPECT_THROW_MSG(ZeroRedundancyOptimizer(net->parameters(), group, [](TensorList) { return nullptr; }),
                     "`make` returned no optimizer");
  });
}

}  // namespace
}  // namespace loom::parallel
