// The CUDA reductions' plan on the CPU: for permuted, sliced and broadcast
// inputs and any set of reduced dims, every output gathers exactly the input
// elements it should (each once), at the right output position; argmax's
// plan keeps the order along its dim.
#include "tensor/cuda/reduce_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "tensor/ops.h"
#include "tests/test_util.h"

namespace loom::cuda {
namespace {

// out position -> the input offsets (in elements) reduced into it, by walking
// every element of `a` with its own strides.
std::map<int64_t, std::vector<int64_t>> reference_groups(const Tensor& a, const Tensor& out) {
  std::map<int64_t, std::vector<int64_t>> groups;
  for (int64_t linear = 0; linear < a.numel(); ++linear) {
    int64_t rest = linear, in = 0, at = 0;
    for (int d = a.dim() - 1; d >= 0; --d) {
      const int64_t i = rest % a.size(d);
      rest /= a.size(d);
      in += i * a.stride(d);
      if (out.size(d) != 1) at += i * out.stride(d);
    }
    groups[at].push_back(in);
  }
  return groups;
}

std::map<int64_t, std::vector<int64_t>> planned_groups(const ReducePlan& plan) {
  std::map<int64_t, std::vector<int64_t>> groups;
  for (int64_t output = 0; output < plan.outputs; ++output) {
    int64_t in, at;
    kept_offsets(plan, output, in, at);
    EXPECT_EQ(groups.count(at), 0u) << "two outputs at offset " << at;
    for (int64_t r = 0; r < plan.reduced; ++r) groups[at].push_back(in + reduced_offset(plan, r));
  }
  return groups;
}

void expect_plan_covers(const Tensor& a, const Tensor& out) {
  const ReducePlan plan = make_plan(a, out, [&](int d) { return out.size(d) == 1; }, true);
  auto expected = reference_groups(a, out), got = planned_groups(plan);
  ASSERT_EQ(got.size(), expected.size()) << a.shape() << " -> " << out.shape();
  for (auto& [at, inputs] : expected) {
    std::vector<int64_t> mine = got[at];
    std::sort(inputs.begin(), inputs.end());
    std::sort(mine.begin(), mine.end());
    ASSERT_EQ(mine, inputs) << "output at " << at << " of " << a.shape() << " -> " << out.shape();
  }
}

TEST(ReducePlan, AFullSumOfAContiguousTensorIsOneUnitStrideRow) {
  Tensor a = randn({4, 5, 6}), out = empty({1, 1, 1});
  const ReducePlan plan = make_plan(a, out, [&](int d) { return out.size(d) == 1; }, true);
  EXPECT_EQ(plan.kept_dims, 0);
  ASSERT_EQ(plan.reduced_dims, 1);
  EXPECT_EQ(plan.reduced_sizes[0], 120);
  EXPECT_EQ(plan.reduced_strides[0], 1);
  EXPECT_EQ(plan.outputs, 1);
  expect_plan_covers(a, out);
}

TEST(ReducePlan, TheUnitStrideReducedDimGoesInnermost) {
  Tensor a = randn({6, 5, 4}).permute({2, 1, 0});  // (4, 5, 6), dim 0 has stride 1
  Tensor out = empty({1, 5, 6});
  const ReducePlan plan = make_plan(a, out, [&](int d) { return out.size(d) == 1; }, true);
  ASSERT_EQ(plan.reduced_dims, 1);
  EXPECT_EQ(plan.reduced_strides[0], 1);
  EXPECT_EQ(plan.kept_dims, 2) << "kept dims 1 and 2 step 4 and 20 in a but 6 and 1 in out";
  expect_plan_covers(a, out);
}

TEST(ReducePlan, KeptDimsMergeOnlyWhereTheOutputStepsEvenlyToo) {
  Tensor a = randn({4, 5, 6});
  Tensor dense = empty({1, 5, 6});
  EXPECT_EQ(make_plan(a, dense, [&](int d) { return d == 0; }, true).kept_dims, 1);
  Tensor transposed = empty({1, 6, 5}).transpose(1, 2);  // (1, 5, 6), dims 1 and 2 swapped in memory
  const ReducePlan plan = make_plan(a, transposed, [&](int d) { return d == 0; }, true);
  EXPECT_EQ(plan.kept_dims, 2) << "contiguous in a, not in out";
  expect_plan_covers(a, transposed);
}

TEST(ReducePlan, RandomViewsAndReducedDimsGatherEveryElementOnce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int dims = 1 + static_cast<int>(rng() % 5);
    std::vector<int64_t> sizes, big;
    for (int d = 0; d < dims; ++d) {
      sizes.push_back(1 + static_cast<int64_t>(rng() % 4));
      big.push_back(2 * sizes.back() + 1);
    }
    Tensor a = randn(Shape(big));
    for (int d = 0; d < dims; ++d) a = a.slice(d, 0, sizes[d] * (1 + rng() % 2), 1 + rng() % 2);
    std::vector<int64_t> order(dims);
    for (int d = 0; d < dims; ++d) order[d] = d;
    std::shuffle(order.begin(), order.end(), rng);
    a = a.permute(order);
    if (rng() % 3 == 0) {  // a broadcast input: stride 0 along some dims
      std::vector<int64_t> shape(a.shape().begin(), a.shape().end());
      const int d = static_cast<int>(rng() % dims);
      a = a.narrow(d, 0, 1).expand(shape);
    }
    std::vector<int64_t> out_shape(a.shape().begin(), a.shape().end());
    for (auto& s : out_shape)
      if (rng() % 2) s = 1;
    Tensor out = empty(Shape(out_shape));
    if (rng() % 2 && out.dim() >= 2) out = empty(Shape(out_shape)).transpose(0, 1).contiguous().transpose(0, 1);
    expect_plan_covers(a, out);
  }
}

TEST(ReducePlan, ArgmaxKeepsThePositionAlongItsDim) {
  Tensor a = randn({3, 4, 5}).permute({1, 2, 0});  // (4, 5, 3)
  for (int dim = 0; dim < 3; ++dim) {
    std::vector<int64_t> out_shape{4, 5, 3};
    out_shape[dim] = 1;
    Tensor out = empty(Shape(out_shape));
    const ReducePlan plan = make_plan(a, out, [&](int d) { return d == dim; }, false);
    ASSERT_EQ(plan.reduced, a.size(dim));
    int64_t in, at;
    kept_offsets(plan, 0, in, at);
    for (int64_t r = 0; r < plan.reduced; ++r)
      EXPECT_EQ(reduced_offset(plan, r), r * a.stride(dim)) << "dim " << dim << ", position " << r;
    expect_plan_covers(a, out);
  }
}

}  // namespace
}  // namespace loom::cuda
