// BatchPrefetcher: in-order delivery, a bounded lead, errors at the right
// batch, and clean shutdown. No sleeps or timeouts: every check holds for
// any scheduling of the threads.
#include "data/prefetcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>

#include "tests/test_util.h"

namespace loom::data {
namespace {

// Batch k: input holds k, target holds k * k.
Batch numbered(int64_t k) {
  return {scalar_tensor(double(k), {.dtype = kInt64}).unsqueeze(0),
          scalar_tensor(double(k * k), {.dtype = kInt64}).unsqueeze(0)};
}

TEST(BatchPrefetcher, DeliversInOrderForAnyNumberOfWorkers) {
  for (int workers : {1, 2, 4, 8}) {
    for (int capacity : {1, 3, 16}) {
      SCOPED_TRACE(::testing::Message() << workers << " workers, capacity " << capacity);
      std::atomic<int> built{0};
      BatchPrefetcher p(
          [&](int64_t k) {
            ++built;
            return numbered(k);
          },
          50, workers, capacity);
      for (int64_t k = 0; k < 50; ++k) {
        Batch b = p.next();
        EXPECT_EQ(b.input.item<int64_t>(), k);
        EXPECT_EQ(b.target.item<int64_t>(), k * k);
      }
      EXPECT_EQ(built.load(), 50);  // each batch built exactly once
      EXPECT_THROW_MSG(p.next(), "BatchPrefetcher: all 50 batches were already taken");
    }
  }
}

TEST(BatchPrefetcher, NeverBuildsMoreThanCapacityAhead) {
  // The consumer counts the next() calls it has begun. When batch k starts
  // building, the consumer must have begun taking batch k - capacity at least.
  const int capacity = 3;
  std::atomic<int64_t> begun{0};
  std::atomic<bool> violated{false};
  BatchPrefetcher p(
      [&](int64_t k) {
        if (k >= begun.load() + capacity) violated = true;
        return numbered(k);
      },
      200, 4, capacity);
  for (int64_t k = 0; k < 200; ++k) {
    ++begun;
    EXPECT_EQ(p.next().input.item<int64_t>(), k);
  }
  EXPECT_FALSE(violated.load());
}

TEST(BatchPrefetcher, AnErrorArrivesWithItsBatch) {
  for (int workers : {1, 4}) {
    BatchPrefetcher p(
        [](int64_t k) {
          if (k == 3) LOOM_FAIL("batch three is broken");
          if (k == 5) throw std::out_of_range("five is not loom's");
          return numbered(k);
        },
        8, workers, 4);
    for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(p.next().input.item<int64_t>(), k);
    EXPECT_THROW_MSG(p.next(), "batch three is broken");
    EXPECT_EQ(p.next().input.item<int64_t>(), 4);  // later batches are unaffected
    EXPECT_THROW(p.next(), std::out_of_range);     // any exception type, unchanged
    EXPECT_EQ(p.next().input.item<int64_t>(), 6);
  }
}

TEST(BatchPrefetcher, DestroyedBeforeAllBatchesAreTaken) {
  // Workers are blocked on a full queue, or building, when the destructor
  // runs; it must wake and join them (a hang would time the test out).
  for (int taken : {0, 1, 5}) {
    std::atomic<int> built{0};
    {
      BatchPrefetcher p(
          [&](int64_t k) {
            ++built;
            return numbered(k);
          },
          1000, 4, 2);
      for (int k = 0; k < taken; ++k) p.next();
    }
    EXPECT_LE(built.load(), taken + 2);  // a batch is claimed only with a free slot
  }
}

TEST(BatchPrefetcher, BadArguments) {
  auto build = [](int64_t k) { return numbered(k); };
  EXPECT_THROW_MSG(BatchPrefetcher(build, 5, 0, 2),
                   "BatchPrefetcher: needs at least one worker, got 0");
  EXPECT_THROW_MSG(BatchPrefetcher(build, 5, 1, 0),
                   "BatchPrefetcher: capacity must be at least 1, got 0");
}

}  // namespace
}  // namespace loom::data
