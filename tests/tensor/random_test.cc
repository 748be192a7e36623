// Random tensors: reproducible from a seed, independent of thread count, and
// distributed as they should be (deterministic draws, so no flakiness).
#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

#include "tests/omp_threads.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::values;

TEST(Random, SameSeedSameNumbers) {
  manual_seed(123);
  Tensor a = randn({1000});
  manual_seed(123);
  Tensor b = randn({1000});
  EXPECT_EQ(values(a), values(b));
  Tensor c = randn({1000});  // the generator moved on
  EXPECT_NE(values(a), values(c));
  Generator g1(5), g2(5), g3(6);
  EXPECT_EQ(values(rand({64}, {}, &g1)), values(rand({64}, {}, &g2)));
  EXPECT_NE(values(rand({64}, {}, &g3)), values(rand({64}, {}, &g1)));
}

TEST(Random, DoesNotDependOnThreadCount) {
  Generator g1(9), g2(9);
  const std::vector<double> one = testing::on_omp_threads(1, [&] { return values(randn({100000}, {}, &g1)); });
  const std::vector<double> two = testing::on_omp_threads(2, [&] { return values(randn({100000}, {}, &g2)); });
  EXPECT_EQ(one, two);
}

TEST(Random, Distributions) {
  Generator gen(17);
  const int64_t n = 200000;
  Tensor u = uniform({n}, -2, 3, {.dtype = kFloat64}, &gen);
  EXPECT_GE(amin(u).item(), -2);
  EXPECT_LT(amax(u).item(), 3);
  EXPECT_NEAR(mean(u).item(), 0.5, 0.02);
  Tensor z = normal({n}, 1.0, 2.0, {.dtype = kFloat64}, &gen);
  EXPECT_NEAR(mean(z).item(), 1.0, 0.02);
  EXPECT_NEAR(std::sqrt(var(z).item()), 2.0, 0.02);
  Tensor r = randint(3, 7, {n}, {.dtype = kInt64}, &gen);
  EXPECT_EQ(amin(r).item<int64_t>(), 3);
  EXPECT_EQ(amax(r).item<int64_t>(), 6);
  Tensor bern = bernoulli({n}, 0.3, {}, &gen);
  EXPECT_NEAR(mean(bern).item(), 0.3, 0.005);
  Tensor perm = randperm(1000, &gen);
  std::vector<double> pv = values(perm);
  EXPECT_EQ(std::set<double>(pv.begin(), pv.end()).size(), 1000u);
  EXPECT_NE(pv, values(arange(1000)));
  EXPECT_THROW_MSG(randint(5, 5, {2}), "randint: empty range [5, 5)");
  EXPECT_THROW_MSG(bernoulli({2}, 1.5), "bernoulli: p must be in [0, 1]");
}

TEST(Random, GeneratorStateRoundTrips) {
  Generator g(77);
  randn({10}, {}, &g);
  GeneratorState s = g.state();
  std::vector<double> next = values(randn({10}, {}, &g));
  g.set_state(s);
  EXPECT_EQ(values(randn({10}, {}, &g)), next);
}

// What activation checkpointing replays: the recorded draws come back in
// order, from any generator, and nothing advances; a recording inside the
// replay keeps the replayed draws.
TEST(Random, RecordedDrawsReplayWithoutAdvancingTheGenerator) {
  Generator g(5);
  std::vector<Draw> log;
  std::vector<double> first, second;
  {
    DrawRecording record(log);
    first = values(rand({4}, {}, &g));
    second = values(randn({3}));  // the default generator, recorded too
  }
  ASSERT_EQ(log.size(), 2u);
  const GeneratorState g_after = g.state(), default_after = default_generator().state();
  std::vector<Draw> inner;
  {
    DrawReplay replay(log);
    EXPECT_EQ(values(rand({4}, {}, &g)), first);
    DrawRecording record(inner);
    EXPECT_EQ(values(randn({3})), second);
  }
  EXPECT_EQ(g.state().offset, g_after.offset);
  EXPECT_EQ(default_generator().state().offset, default_after.offset);
  ASSERT_EQ(inner.size(), 1u);
  EXPECT_EQ(inner[0].offset, log[1].offset);
  DrawReplay replay(inner);
  rand({1});
  EXPECT_THROW_MSG(rand({1}), "draws more random numbers than its forward did (1 draws)");
}

// A thread holding a ThreadDefaultGenerator draws from its own: two such
// threads seeded alike draw the same numbers whatever the other threads do,
// and the process's generator neither moves nor is reseeded meanwhile. When
// it ends, the thread's default is the one it had before (they nest).
TEST(Random, ThreadDefaultGeneratorIsTheThreadsOwn) {
  manual_seed(7);
  const GeneratorState process_before = default_generator().state();
  EXPECT_FALSE(thread_has_own_default_generator());
  std::vector<double> drawn[2];
  std::thread threads[2];
  for (int t = 0; t < 2; ++t)
    threads[t] = std::thread([&, t] {
      ThreadDefaultGenerator own;
      EXPECT_TRUE(thread_has_own_default_generator());
      manual_seed(1234);
      drawn[t] = values(randn({256}));
    });
  randn({64});  // the process's generator, meanwhile
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(drawn[0], drawn[1]);
  Generator alike(1234);
  EXPECT_EQ(drawn[0], values(randn({256}, {}, &alike)));
  EXPECT_EQ(default_generator().seed(), 7u) << "a thread's manual_seed reseeded the process's generator";
  EXPECT_EQ(default_generator().state().offset, process_before.offset + 1) << "only this thread's one draw";
  {
    ThreadDefaultGenerator outer(5);
    rand({8});  // the outer generator's first draw
    {
      ThreadDefaultGenerator inner(6);
      Generator six(6);
      EXPECT_EQ(values(rand({8})), values(rand({8}, {}, &six)));
    }
    Generator five(5);
    rand({8}, {}, &five);  // as the outer generator drew once
    EXPECT_EQ(values(rand({8})), values(rand({8}, {}, &five))) << "the outer generator after the inner one ended";
  }
  EXPECT_FALSE(thread_has_own_default_generator());
  EXPECT_EQ(default_generator().seed(), 7u);
}

}  // namespace
}  // namespace loom
