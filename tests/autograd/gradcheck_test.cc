// Every differentiable op (the table in op_cases.h, shared with the GPU test)
// against central finite differences in float64, including broadcasting,
// non-contiguous views and multi-dim reductions.
#include "autograd/gradcheck.h"

#include <gtest/gtest.h>

#include <functional>

#include "autograd/node.h"
#include "tests/autograd/op_cases.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using autograd::gradcheck;
using testing::leaf64;
using testing::OpCase;

// Float64 leaves with values in [low, high).
TensorList inputs_for(const OpCase& c, uint64_t seed) {
  TensorList in;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Generator g(seed + i);
    in.push_back(uniform(c.shapes[i], c.low, c.high, {.dtype = kFloat64}, &g).requires_grad_());
  }
  return in;
}

std::vector<OpCase> checkable_cases() {
  std::vector<OpCase> out;
  for (OpCase& c : testing::op_cases())
    if (c.finite_differences) out.push_back(std::move(c));
  return out;
}


class Gradcheck : public ::testing::TestWithParam<OpCase> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  autograd::GradcheckResult r = gradcheck(c.fn, inputs_for(c, 11));
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllOps, Gradcheck, ::testing::ValuesIn(checkable_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

// Finite differences through float32 rounding are noise, so the dtype
// conversion is checked directly: the gradient comes back in float64.
TEST(Conversion, ToDtypeGradientReturnsInTheInputDtype) {
  Tensor x = leaf64({3}, 2);
  Tensor y = x.to(kFloat32) * 2.0;
  y.backward(from_vector<float>({1, 2, 3}));
  EXPECT_EQ(x.grad().dtype(), kFloat64);
  testing::expect_values(x.grad(), {2, 4, 6});
}

// gradcheck must be able to fail: an op recorded with a wrong gradient.
TEST(GradcheckItself, CatchesAWrongGradient) {
  auto wrong_square = [](const TensorList& in) {
    Tensor y = square(in[0].detach());
    autograd::record("WrongSquareBackward", {in[0]}, y, [x = autograd::SavedTensor(in[0])](const TensorList& g) {
      return TensorList{g[0] * x.get() * 2.01};  // off by half a percent
    });
    return y;
  };
  autograd::GradcheckResult r = gradcheck(wrong_square, {leaf64({3}, 1)});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("analytic"), std::string::npos);
}

TEST(GradcheckItself, RejectsNonFloat64Inputs) {
  EXPECT_THROW_MSG(gradcheck([](const TensorList& in) { return in[0] * 2.0; }, {ones({2}).requires_grad_()}),
                   "gradcheck: input 0 must be a contiguous float64 CPU leaf, got float32");
}

}  // namespace
}  // namespace loom
