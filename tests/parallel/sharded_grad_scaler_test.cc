// ShardedGradScaler: ranks that each see part of the gradients skip the
// same steps and keep the same scale; a plain GradScaler on the same
// gradients would let the ranks diverge.
#include "parallel/sharding/sharded_grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "optim/optimizer.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/zero.h"
#include "tests/parallel/sharding_checks.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

using loom::testing::values;
using Models = std::pair<nn::ModulePtr, nn::ModulePtr>;

// Rank `bad_rank`'s gradient holds an inf (-1: none); returns this rank's
// parameter after one step, and the scale after update().
struct Outcome {
  std::vector<double> param;
  double scale;
  bool stepped;
};

template <typename Scaler>
Outcome step_on(Scaler& scaler, int rank, int bad_rank) {
  Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.5});
  w.set_grad(rank == bad_rank ? from_vector<float>({INFINITY, 4}, {2}) : full({2}, 4.0f));
  const bool stepped = scaler.step(opt);
  scaler.update();
  return {values(w), scaler.get_scale(), stepped};
}

TEST(ShardedGradScaler, EveryRankSkipsWhenOneRanksGradientsOverflow) {
  std::vector<Outcome> sharded(2), plain(2);
  testing::run_rank_threads(2, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    ShardedGradScaler scaler(group, {.init_scale = 4.0});
    sharded[rank] = step_on(scaler, rank, /*bad_rank=*/1);
    optim::GradScaler alone({.init_scale = 4.0});
    plain[rank] = step_on(alone, rank, /*bad_rank=*/1);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(sharded[r].stepped) << "rank " << r;
    EXPECT_EQ(sharded[r].param, (std::vector<double>{1, 1})) << "rank " << r;
    EXPECT_EQ(sharded[r].scale, 2.0) << "rank " << r;
  }
  // Without agreeing, rank 0 would have stepped and kept its scale.
  EXPECT_TRUE(plain[0].stepped);
  EXPECT_FALSE(plain[1].stepped);
  EXPECT_EQ(plain[0].scale, 4.0);
}

TEST(ShardedGradScaler, EveryRankStepsWhenAllGradientsAreFinite) {
  std::vector<Outcome> sharded(3);
  testing::run_rank_threads(3, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    ShardedGradScaler scaler(group, {.init_scale = 4.0});
    sharded[rank] = step_on(scaler, rank, /*bad_rank=*/-1);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(sharded[r].stepped) << "rank " << r;
    EXPECT_EQ(sharded[r].param, (std::vector<double>{0.5, 0.5})) << "rank " << r;  // 1 - 0.5 * (4 / 4)
    EXPECT_EQ(sharded[r].scale, 4.0) << "rank " << r;
  }
}

// ZeRO-1 reduces the gradients in step(), after the scaler has unscaled
// this rank's own: with a power-of-two scale the training is the same, bit
// for bit, as without a scaler.
TEST(ShardedGradScaler, ZeroStage1TrainsAsWithoutAScaler) {
  namespace F = nn::functional;
  std::vector<Models> scaled(2), plain(2);
  for (int r = 0; r < 2; ++r) scaled[r] = plain[r] = testing::sharded_models(r);
  for (int r = 0; r < 2; ++r) plain[r].second = scaled[r].second->clone();  // the same start, trained apart
  // SGD, whose step is proportional to the gradient: a scale left in would show.
  auto make_sgd = [](TensorList shard) { return std::make_unique<optim::SGD>(shard, optim::SGDOptions{.lr = 0.1}); };
  testing::run_rank_threads(2, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    ZeroRedundancyOptimizer opt_scaled(scaled[rank].second->parameters(), group, make_sgd, {.stage = 1});
    ZeroRedundancyOptimizer opt_plain(plain[rank].second->parameters(), group, make_sgd, {.stage = 1});
    ShardedGradScaler scaler(group);
    Generator gen(5);
    for (int step = 0; step < 3; ++step) {
      Tensor x = randn({6, 2, 6, 6}, {.dtype = kFloat64}, &gen).narrow(0, 3 * rank, 3);
      Tensor y = randint(0, 3, {6}, {.dtype = kInt64}, &gen).narrow(0, 3 * rank, 3);
      opt_scaled.zero_grad();
      scaler.scale(F::cross_entropy(scaled[rank].second->forward(x), y)).backward();
      EXPECT_TRUE(scaler.step(opt_scaled));
      scaler.update();
      opt_plain.zero_grad();
      F::cross_entropy(plain[rank].second->forward(x), y).backward();
      opt_plain.step();
    }
  });
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(testing::max_param_difference(*scaled[r].second, *plain[r].second), 0) << "rank " << r;
}

// FSDP reduce-scatters the gradients during backward into the shards the
// optimizer steps, and the scaler unscales those shards: with a power-of-two
// scale the training is the same, bit for bit, as without a scaler, while
// every rank checks only its own piece of the gradients.
TEST(ShardedGradScaler, FsdpTrainsAsWithoutAScaler) {
  namespace F = nn::functional;
  const testing::FsdpCase c{.units = testing::Units::Layers};
  std::vector<nn::StateDict> scaled(2), plain(2);
  std::vector<double> scales(2);
  // Built here, not in the rank threads: fsdp_models seeds the global generator.
  std::vector<nn::ModulePtr> to_scale, to_train_plain;
  for (int r = 0; r < 2; ++r) {
    to_scale.push_back(testing::fsdp_models(r, c.units).second);
    to_train_plain.push_back(testing::fsdp_models(r, c.units).second);
  }
  testing::run_rank_threads(2, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    FullyShardedDataParallel fsdp_scaled(to_scale[rank], group, testing::fsdp_options(c));
    FullyShardedDataParallel fsdp_plain(to_train_plain[rank], group, testing::fsdp_options(c));
    // SGD, whose step is proportional to the gradient: a scale left in would show.
    optim::SGD opt_scaled(fsdp_scaled->parameters(), {.lr = 0.1});
    optim::SGD opt_plain(fsdp_plain->parameters(), {.lr = 0.1});
    ShardedGradScaler scaler(group, {.growth_interval = 2});  // the scale grows mid-run
    for (int step = 0; step < 4; ++step) {
      auto [x, y] = testing::stream_batch(step, 0);
      Tensor mine_x = x.narrow(0, 6 * rank, 6), mine_y = y.narrow(0, 6 * rank, 6);
      opt_scaled.zero_grad();
      scaler.scale(F::cross_entropy(fsdp_scaled->forward(mine_x), mine_y)).backward();
      EXPECT_TRUE(scaler.step(opt_scaled)) << "rank " << rank << ", step " << step;
      scaler.update();
      opt_plain.zero_grad();
      F::cross_entropy(fsdp_plain->forward(mine_x), mine_y).backward();
      opt_plain.step();
    }
    scales[rank] = scaler.get_scale();
    scaled[rank] = fsdp_scaled->full_state_dict();
    plain[rank] = fsdp_plain->full_state_dict();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(scales[r], 65536.0 * 4) << "rank " << r;  // doubled after steps 2 and 4
    ASSERT_EQ(scaled[r].size(), plain[r].size());
    for (size_t i = 0; i < plain[r].size(); ++i)
      EXPECT_EQ(values(scaled[r][i].second), values(plain[r][i].second)) << "rank " << r << ", " << plain[r][i].first;
  }
  // The training moved the parameters: the comparison above is not of two untouched models.
  const nn::StateDict start = testing::fsdp_models(0, c.units).first->state_dict();
  EXPECT_NE(values(start[0].second), values(plain[0][0].second));
}

// ZeRO-2 scatters the gradients during backward: the scaler would see none,
// and the step would use gradients 65536 times too large. A clear error.
TEST(ShardedGradScaler, ZeroStage2IsAClearError) {
  namespace F = nn::functional;
  Models models = testing::sharded_models(0);
  testing::run_rank_threads(1, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    ZeroRedundancyOptimizer opt(models.second->parameters(), group, testing::make_adamw, {.stage = 2});
    ShardedGradScaler scaler(group);
    opt.zero_grad();
    Tensor x = randn({3, 2, 6, 6}, {.dtype = kFloat64});
    scaler.scale(F::cross_entropy(models.second->forward(x), randint(0, 3, {3}, {.dtype = kInt64}))).backward();
    EXPECT_THROW_MSG(scaler.step(opt), "an optimizer that reduces the gradients inside step() (ZeroRedundancyOptimizer "
                                       "at stage 2) cannot take a GradScaler");
  });
}

}  // namespace
}  // namespace loom::parallel
