// Balancing a pipeline's stages: the partition against hand-worked cases and
// brute force, and timing against children of known cost.
#include "parallel/pipeline/balance.h"

#include <gtest/gtest.h>

#include "nn/nn.h"
#include "tests/parallel/sleep_stage.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

// The largest run's sum when `costs` are cut at `boundaries`.
double largest_run(const std::vector<double>& costs, const std::vector<int>& boundaries) {
  std::vector<int> ends = boundaries;
  ends.push_back(static_cast<int>(costs.size()));
  double largest = 0;
  int begin = 0;
  for (int end : ends) {
    double sum = 0;
    for (int i = begin; i < end; ++i) sum += costs[i];
    largest = std::max(largest, sum);
    begin = end;
  }
  return largest;
}

TEST(BalancedBoundaries, HandWorkedCases) {
  // A heavy layer gets a stage of its own; the light ones share.
  EXPECT_EQ(balanced_boundaries({1, 1, 8, 1, 1, 1, 1}, 3), (std::vector<int>{2, 3}));
  // Equal costs: equal runs.
  EXPECT_EQ(balanced_boundaries({1, 1, 1, 1, 1, 1}, 3), (std::vector<int>{2, 4}));
  // One part: no cuts; as many parts as layers: a cut after each.
  EXPECT_EQ(balanced_boundaries({3, 1, 2}, 1), std::vector<int>{});
  EXPECT_EQ(balanced_boundaries({3, 1, 2}, 3), (std::vector<int>{1, 2}));
  // A tie (the largest run 5 either way) goes to the earliest cut.
  EXPECT_EQ(balanced_boundaries({5, 0, 5}, 2), (std::vector<int>{1}));
}

// Against every way of cutting small random cost lists.
TEST(BalancedBoundaries, NoCutHasASmallerLargestRun) {
  Generator gen(3);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 1 + trial % 8;
    const std::vector<double> costs = rand({n}, {.dtype = kFloat64}, &gen).to_vector<double>();
    for (int parts = 1; parts <= n; ++parts) {
      const std::vector<int> found = balanced_boundaries(costs, parts);
      ASSERT_EQ(found.size(), static_cast<size_t>(parts - 1));
      for (size_t k = 0; k < found.size(); ++k) {
        EXPECT_GT(found[k], k == 0 ? 0 : found[k - 1]) << "runs of at least one layer";
        EXPECT_LT(found[k], n);
      }
      // Every set of parts - 1 cuts among positions 1 .. n - 1, as a bit mask.
      double best = INFINITY;
      for (int mask = 0; mask < (1 << (n - 1)); ++mask) {
        if (__builtin_popcount(mask) != parts - 1) continue;
        std::vector<int> cuts;
        for (int i = 0; i < n - 1; ++i)
          if (mask & (1 << i)) cuts.push_back(i + 1);
        best = std::min(best, largest_run(costs, cuts));
      }
      EXPECT_DOUBLE_EQ(largest_run(costs, found), best) << "n " << n << " parts " << parts;
    }
  }
}

TEST(BalancedBoundaries, ImpossibleCutsAreAClearError) {
  EXPECT_THROW_MSG(balanced_boundaries({1, 2}, 3), "cannot cut 2 layers into 3 parts");
  EXPECT_THROW_MSG(balanced_boundaries({1, 2}, 0), "cannot cut 2 layers into 0 parts");
  EXPECT_THROW_MSG(balanced_boundaries({1, -2}, 1), "a cost is negative");
}

// Children that sleep 2, 2, 12, 2, 2, 2 ms a forward and as long for each
// half of the backward (the input's gradient, then the weights'): the 12 ms
// one gets a stage of its own.
TEST(BalanceByTime, TheSlowChildGetsAStageOfItsOwn) {
  nn::Sequential model;
  for (int ms : {2, 2, 12, 2, 2, 2}) model->push_back(std::make_shared<testing::SleepStageImpl>(ms, ms));
  const ChildCosts costs = time_children(model, ones({4, 2}));
  ASSERT_EQ(costs.forward_seconds.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {  // a sleep lasts at least as long as asked
    const double ms = i == 2 ? 0.012 : 0.002;
    EXPECT_GE(costs.forward_seconds[i], ms) << "child " << i;
    EXPECT_GE(costs.backward_input_seconds[i], ms) << "child " << i;
    EXPECT_GE(costs.backward_weight_seconds[i], ms) << "child " << i;
    EXPECT_GE(costs.backward_seconds[i], 2 * ms) << "child " << i;
    EXPECT_EQ(costs.output_bytes[i], 4 * 2 * 4) << "child " << i;
  }
  EXPECT_EQ(balance_by_time(model, ones({4, 2}), 3), (std::vector<int>{2, 3}));
}

// Each part's pass times are its children's added up.
TEST(PartPassTimes, AddUpEachPartsChildren) {
  ChildCosts costs;
  costs.forward_seconds = {1, 2, 3, 4};
  costs.backward_input_seconds = {2, 4, 6, 8};
  costs.backward_weight_seconds = {0.5, 0, 0, 1};
  costs.backward_seconds = {2.5, 4, 6, 9};
  const std::vector<PassTimes> parts = part_pass_times(costs, {1, 3});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].forward, 1);
  EXPECT_EQ(parts[0].backward_weight, 0.5);
  EXPECT_EQ(parts[1].forward, 5);
  EXPECT_EQ(parts[1].backward_input, 10);
  EXPECT_EQ(parts[1].backward_weight, 0);
  EXPECT_EQ(parts[2].backward_input, 8);
  EXPECT_EQ(parts[2].backward_weight, 1);
  EXPECT_THROW_MSG(part_pass_times(costs, {3, 2}), "boundaries must increase strictly within (0, 4)");
  EXPECT_THROW_MSG(part_pass_times(costs, {5}), "boundaries must increase strictly within (0, 4)");
}

// Timing runs on a copy and gives the random numbers back: the model's
// parameters get no gradients, and Dropout later draws what it would have.
TEST(BalanceByTime, LeavesTheModelAndTheRandomNumbersAsTheyWere) {
  manual_seed(4);
  nn::Sequential model(nn::Linear(6, 8), nn::Dropout(0.5), nn::Linear(8, 3));
  const GeneratorState before = default_generator().state();
  balance_by_time(model, ones({5, 6}), 2);
  EXPECT_EQ(default_generator().state().offset, before.offset);
  for (const Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_THROW_MSG(balance_by_time(model, ones({5, 6}), 4), "cannot cut 3 layers into 4 stages");
}

}  // namespace
}  // namespace loom::parallel
