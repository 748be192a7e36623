// ShardedGradScaler: ranks that each see part of the gradients skip the
// same steps and keep the same scale; a plain GradScaler on the same
// gradients would let the ranks diverge.
#include "parallel/sharding/sharded_grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "optim/optimizer.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

using loom::testing::values;

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

}  // namespace
}  // namespace loom::parallel
