// DistributedSampler: disjoint equal shares that cover the dataset, with
// PyTorch's padding rule, deterministic per epoch and different across epochs.
#include "data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "tests/test_util.h"

namespace loom::data {
namespace {

std::vector<std::vector<int64_t>> shares(int world, int64_t n, bool shuffle, bool drop_last,
                                         int64_t epoch, uint64_t seed = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r)
    out.push_back(DistributedSampler(r, world, shuffle, seed, drop_last).indices(n, epoch));
  return out;
}

TEST(DistributedSampler, SequentialSharesInterleave) {
  // PyTorch: indices[rank : total : world_size].
  auto s = shares(3, 9, /*shuffle=*/false, false, 0);
  EXPECT_EQ(s[0], (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(s[1], (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(s[2], (std::vector<int64_t>{2, 5, 8}));
}

TEST(DistributedSampler, PadsByWrappingAround) {
  // 10 over 4 ranks: 3 each, 12 in all, so positions 10 and 11 repeat 0 and 1.
  auto s = shares(4, 10, false, false, 0);
  EXPECT_EQ(s[0], (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(s[1], (std::vector<int64_t>{1, 5, 9}));
  EXPECT_EQ(s[2], (std::vector<int64_t>{2, 6, 0}));
  EXPECT_EQ(s[3], (std::vector<int64_t>{3, 7, 1}));
  // Fewer examples than ranks: the order repeats as often as needed
  // (PyTorch: (indices * ceil(padding / len))[:padding]).
  auto tiny = shares(5, 2, false, false, 0);
  for (int r = 0; r < 5; ++r) EXPECT_EQ(tiny[r], (std::vector<int64_t>{r % 2}));
}

TEST(DistributedSampler, DropLastDropsTheTail) {
  auto s = shares(4, 10, false, /*drop_last=*/true, 0);
  EXPECT_EQ(s[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(s[3], (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(DistributedSampler(0, 4, true, 0, true).num_samples(10), 2);
  EXPECT_EQ(DistributedSampler(0, 4, true, 0, false).num_samples(10), 3);
  EXPECT_TRUE(shares(4, 3, false, true, 0)[0].empty());  // fewer than world_size: nothing
}

// For many sizes and world sizes, shuffled: equal lengths, every example
// covered, and repeats (padding) or omissions (drop_last) only as many as
// the rule says.
TEST(DistributedSampler, SharesAreEqualDisjointAndCover) {
  for (int world : {1, 2, 3, 4, 7}) {
    for (int64_t n : {1, 2, 6, 7, 100, 101}) {
      for (bool drop_last : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "world " << world << ", n " << n << ", drop_last " << drop_last);
        auto s = shares(world, n, true, drop_last, 3, 17);
        const int64_t per_rank = drop_last ? n / world : (n + world - 1) / world;
        std::map<int64_t, int> seen;
        for (const auto& share : s) {
          EXPECT_EQ(static_cast<int64_t>(share.size()), per_rank);
          for (int64_t i : share) {
            EXPECT_TRUE(i >= 0 && i < n) << i;
            seen[i]++;
          }
        }
        const int64_t total = per_rank * world;
        if (total >= n) {  // every example at least once, and the extras are the padding
          EXPECT_EQ(static_cast<int64_t>(seen.size()), n);
          int64_t repeats = 0;
          for (auto& [i, count] : seen) repeats += count - 1;
          EXPECT_EQ(repeats, total - n);
          if (total - n <= n) {  // padding smaller than the dataset: nothing seen three times
            for (auto& [i, count] : seen) EXPECT_LE(count, 2);
          }
        } else {  // drop_last: disjoint, and exactly total distinct examples
          EXPECT_EQ(static_cast<int64_t>(seen.size()), total);
          for (auto& [i, count] : seen) EXPECT_EQ(count, 1);
        }
      }
    }
  }
}

TEST(DistributedSampler, WithoutPaddingSharesAreDisjoint) {
  auto s = shares(4, 100, true, false, 0);
  std::set<int64_t> all;
  for (const auto& share : s) all.insert(share.begin(), share.end());
  EXPECT_EQ(all.size(), 100u);  // 4 x 25 distinct: disjoint
}

TEST(DistributedSampler, DeterministicPerEpochDifferentAcrossEpochs) {
  DistributedSampler a(1, 4, true, 5), b(1, 4, true, 5);
  EXPECT_EQ(a.indices(1000, 2), b.indices(1000, 2));
  EXPECT_NE(a.indices(1000, 2), a.indices(1000, 3));
  EXPECT_NE(a.indices(1000, 2), DistributedSampler(1, 4, true, 6).indices(1000, 2));
  // The shuffled order is RandomSampler's: with one rank they agree.
  EXPECT_EQ(DistributedSampler(0, 1, true, 5).indices(1000, 2), RandomSampler(5).indices(1000, 2));
}

TEST(DistributedSampler, SetEpochAsInPyTorch) {
  DistributedSampler s(0, 2, true, 1);
  EXPECT_EQ(s.epoch(), 0);
  const std::vector<int64_t> e0 = s.indices(50);
  s.set_epoch(4);
  EXPECT_EQ(s.epoch(), 4);
  EXPECT_EQ(s.indices(50), s.indices(50, 4));
  EXPECT_NE(s.indices(50), e0);
}

TEST(DistributedSampler, BadArguments) {
  EXPECT_THROW_MSG(DistributedSampler(2, 2),
                   "DistributedSampler: rank 2 is out of range for world_size 2");
  EXPECT_THROW_MSG(DistributedSampler(-1, 2), "DistributedSampler: rank -1 is out of range");
  EXPECT_THROW_MSG(DistributedSampler(0, 0),
                   "DistributedSampler: world_size must be at least 1, got 0");
  EXPECT_THROW_MSG(DistributedSampler(0, 2).indices(-5, 0),
                   "DistributedSampler: negative dataset size -5");
}

}  // namespace
}  // namespace loom::data
