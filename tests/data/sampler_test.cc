// SequentialSampler and RandomSampler.
#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/test_util.h"

namespace loom::data {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

bool is_permutation_of_range(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  return v == iota(n);
}

TEST(SequentialSampler, InOrderEveryEpoch) {
  SequentialSampler s;
  EXPECT_EQ(s.indices(5, 0), iota(5));
  EXPECT_EQ(s.indices(5, 7), iota(5));
  EXPECT_EQ(s.num_samples(5), 5);
  EXPECT_TRUE(s.indices(0, 0).empty());
  EXPECT_THROW_MSG(s.indices(-1, 0), "SequentialSampler: negative dataset size -1");
}

TEST(RandomSampler, APermutationDeterminedBySeedAndEpoch) {
  RandomSampler s(42);
  const std::vector<int64_t> e0 = s.indices(1000, 0), e1 = s.indices(1000, 1);
  EXPECT_TRUE(is_permutation_of_range(e0, 1000));
  EXPECT_TRUE(is_permutation_of_range(e1, 1000));
  EXPECT_NE(e0, iota(1000));
  EXPECT_NE(e0, e1);                                  // a new order each epoch
  EXPECT_EQ(RandomSampler(42).indices(1000, 0), e0);  // the same for the same (seed, epoch)
  EXPECT_EQ(s.indices(1000, 1), e1);
  EXPECT_NE(RandomSampler(43).indices(1000, 0), e0);
  EXPECT_EQ(s.num_samples(1000), 1000);
}

TEST(RandomSampler, NeighbouringSeedsAndEpochsDoNotCoincide) {
  // PyTorch seeds with seed + epoch, so (seed 1, epoch 0) repeats (seed 0,
  // epoch 1); loom mixes the two instead.
  EXPECT_NE(RandomSampler(1).indices(100, 0), RandomSampler(0).indices(100, 1));
  // Over many epochs, every order differs from the others.
  std::vector<std::vector<int64_t>> orders;
  for (int64_t e = 0; e < 50; ++e) orders.push_back(RandomSampler(0).indices(100, e));
  std::sort(orders.begin(), orders.end());
  EXPECT_EQ(std::unique(orders.begin(), orders.end()), orders.end());
}

TEST(RandomSampler, PositionsAreSpreadEvenly) {
  // Over 2000 epochs, where does element 0 land? Each of 10 positions should
  // see it about 200 times; a broken shuffle (e.g. biased modulo or a stuck
  // position) would not. Deterministic, so no flakiness: the bound is ~7 sigma.
  std::vector<int> where(10);
  for (int64_t e = 0; e < 2000; ++e) {
    std::vector<int64_t> order = RandomSampler(9).indices(10, e);
    where[std::find(order.begin(), order.end(), 0) - order.begin()]++;
  }
  for (int count : where) EXPECT_NEAR(count, 200, 95);
}

TEST(RandomSampler, SmallAndEmpty) {
  EXPECT_TRUE(RandomSampler().indices(0, 0).empty());
  EXPECT_EQ(RandomSampler().indices(1, 3), (std::vector<int64_t>{0}));
  EXPECT_THROW_MSG(RandomSampler().indices(-2, 0), "RandomSampler: negative dataset size -2");
}

TEST(SharedSampler, FromAValueOrASharedPointer) {
  SharedSampler none;
  EXPECT_FALSE(none);
  EXPECT_FALSE(SharedSampler(nullptr));
  auto owned = std::make_shared<RandomSampler>(3);
  SharedSampler shared = owned;
  EXPECT_EQ(shared.operator->(), owned.get());  // shared, not copied
  SharedSampler copied = RandomSampler(3);
  EXPECT_NE(copied.operator->(), owned.get());
  EXPECT_EQ(copied->indices(20, 1), owned->indices(20, 1));
  SharedSampler again = copied;  // copies of the handle share the sampler
  EXPECT_EQ(again.operator->(), copied.operator->());
  EXPECT_EQ((*again).num_samples(20), 20);
}

}  // namespace
}  // namespace loom::data
