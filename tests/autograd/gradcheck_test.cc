// Every differentiable op against central finite differences in float64,
// including broadcasting, non-contiguous views and multi-dim reductions.
#include "autograd/gradcheck.h"

#include <gtest/gtest.h>

#include <functional>

#include "autograd/node.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using autograd::gradcheck;
using testing::leaf64;
using Fn = std::function<Tensor(const TensorList&)>;

struct Case {
  std::string name;
  Fn fn;
  std::vector<Shape> shapes;
  double low = -2, high = 2;  // input range (shifted away from kinks where needed)
};

// Float64 leaves with values in [low, high).
TensorList inputs_for(const Case& c, uint64_t seed) {
  TensorList in;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    Generator g(seed + i);
    in.push_back(uniform(c.shapes[i], c.low, c.high, {.dtype = kFloat64}, &g).requires_grad_());
  }
  return in;
}

std::vector<Case> cases() {
  return {
      // unary
      {"neg", [](auto& x) { return -x[0]; }, {{3, 4}}},
      {"abs", [](auto& x) { return abs(x[0]); }, {{3, 4}}, 0.1, 2},
      {"square", [](auto& x) { return square(x[0]); }, {{3, 4}}},
      {"reciprocal", [](auto& x) { return reciprocal(x[0]); }, {{3, 4}}, 0.5, 2},
      {"exp", [](auto& x) { return exp(x[0]); }, {{3, 4}}},
      {"log", [](auto& x) { return log(x[0]); }, {{3, 4}}, 0.2, 3},
      {"sqrt", [](auto& x) { return sqrt(x[0]); }, {{3, 4}}, 0.2, 3},
      {"rsqrt", [](auto& x) { return rsqrt(x[0]); }, {{3, 4}}, 0.2, 3},
      {"sin", [](auto& x) { return sin(x[0]); }, {{3, 4}}},
      {"cos", [](auto& x) { return cos(x[0]); }, {{3, 4}}},
      {"pow_scalar", [](auto& x) { return pow(x[0], 3.5); }, {{3, 4}}, 0.2, 2},
      {"clamp", [](auto& x) { return clamp(x[0], -0.7, 0.9); }, {{4, 5}}},
      {"tanh", [](auto& x) { return tanh(x[0]); }, {{3, 4}}},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }, {{3, 4}}},
      {"relu", [](auto& x) { return relu(x[0]); }, {{3, 4}}},
      {"gelu", [](auto& x) { return gelu(x[0]); }, {{3, 4}}},
      {"gelu_tanh", [](auto& x) { return gelu(x[0], GeluApproximation::Tanh); }, {{3, 4}}},
      // binary, broadcasting both ways
      {"add", [](auto& x) { return add(x[0], x[1], 0.7); }, {{3, 4}, {4}}},
      {"sub", [](auto& x) { return sub(x[0], x[1], 1.3); }, {{3, 1}, {1, 4}}},
      {"mul", [](auto& x) { return x[0] * x[1]; }, {{2, 3, 4}, {3, 1}}},
      {"div", [](auto& x) { return x[0] / x[1]; }, {{3, 4}, {3, 4}}, 0.5, 2},
      {"div_broadcast", [](auto& x) { return x[0] / x[1]; }, {{4}, {3, 4}}, 0.5, 2},
      {"pow_tensor", [](auto& x) { return pow(x[0], x[1]); }, {{3, 4}, {4}}, 0.5, 2},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }, {{3, 4}, {3, 4}}},
      {"minimum", [](auto& x) { return minimum(x[0], x[1]); }, {{3, 4}, {4}}},
      {"lerp", [](auto& x) { return lerp(x[0], x[1], 0.3); }, {{3, 4}, {3, 1}}},
      {"scalar_ops", [](auto& x) { return (2.0 - x[0]) / 3.0 + 1.5 * x[0] - x[0] / 0.5; }, {{3, 4}}},
      // selection
      {"where", [](auto& x) { return where(x[0] > 0.0, x[0], x[1]); }, {{3, 4}, {4}}},
      {"masked_fill", [](auto& x) { return masked_fill(x[0], x[0] < 0.0, 0.25); }, {{3, 4}}},
      // reductions
      {"sum_all", [](auto& x) { return sum(x[0]); }, {{3, 4}}},
      {"sum_dims", [](auto& x) { return sum(x[0], {0, 2}); }, {{2, 3, 4}}},
      {"sum_keepdim", [](auto& x) { return sum(x[0], {1}, true); }, {{2, 3, 4}}},
      {"mean", [](auto& x) { return mean(x[0], {-1}); }, {{2, 3, 4}}},
      {"amax", [](auto& x) { return amax(x[0], {1, 2}); }, {{2, 3, 4}}},
      {"amin_keepdim", [](auto& x) { return amin(x[0], {0}, true); }, {{3, 4}}},
      {"var", [](auto& x) { return var(x[0], {0, 1}); }, {{3, 4, 2}}},
      {"var_population", [](auto& x) { return var(x[0], {1}, 0, true); }, {{3, 4}}},
      // softmax
      {"softmax_last", [](auto& x) { return softmax(x[0], -1); }, {{3, 5}}},
      {"softmax_middle", [](auto& x) { return softmax(x[0], 1); }, {{2, 3, 4}}},
      {"log_softmax", [](auto& x) { return log_softmax(x[0], 0); }, {{3, 4}}},
      {"log_softmax_strided", [](auto& x) { return log_softmax(x[0].t(), 1); }, {{3, 4}}},
      // matrix products, including transposed operands and broadcast batches
      {"mm", [](auto& x) { return mm(x[0], x[1]); }, {{3, 4}, {4, 2}}},
      {"mm_transposed", [](auto& x) { return mm(x[0].t(), x[1].t()); }, {{4, 3}, {2, 4}}},
      {"bmm", [](auto& x) { return bmm(x[0], x[1]); }, {{2, 3, 4}, {2, 4, 2}}},
      {"matmul_broadcast", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 1, 3, 4}, {3, 4, 2}}},
      {"matmul_folded", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 5}}},
      {"matmul_vector", [](auto& x) { return matmul(x[0], x[1]); }, {{4}, {3, 4, 2}}},
      // indexing
      {"index_select", [](auto& x) { return index_select(x[0], 0, from_vector<int64_t>({2, 0, 2})); }, {{3, 4}}},
      {"index_select_dim1", [](auto& x) { return index_select(x[0], 1, from_vector<int64_t>({3, 1})); }, {{3, 4}}},
      {"gather", [](auto& x) { return gather(x[0], 1, from_vector<int64_t>({0, 2, 2, 1, 0, 0}, {3, 2})); }, {{3, 4}}},
      {"scatter_add",
       [](auto& x) { return scatter_add(x[0], 0, from_vector<int64_t>({1, 0, 1, 1, 0, 0}, {2, 3}), x[1]); },
       {{3, 3}, {2, 3}}},
      {"index_add", [](auto& x) { return index_add(x[0], 0, from_vector<int64_t>({1, 1}), x[1]); }, {{3, 2}, {2, 2}}},
      // views and copies
      {"reshape", [](auto& x) { return x[0].reshape({4, 3}) * x[1]; }, {{3, 4}, {3}}},
      {"reshape_copying", [](auto& x) { return x[0].t().reshape({12}); }, {{3, 4}}},
      {"transpose", [](auto& x) { return x[0].transpose(0, 2); }, {{2, 3, 4}}},
      {"permute", [](auto& x) { return x[0].permute({1, 2, 0}) * 2.0; }, {{2, 3, 4}}},
      {"narrow", [](auto& x) { return x[0].narrow(1, 1, 2); }, {{3, 4}}},
      {"slice_step", [](auto& x) { return x[0].slice(1, 0, 4, 2); }, {{3, 4}}},
      {"select", [](auto& x) { return x[0].select(0, 1); }, {{3, 4}}},
      {"expand", [](auto& x) { return x[0].expand({2, 3, 4}); }, {{3, 1}}},
      {"squeeze_unsqueeze", [](auto& x) { return x[0].unsqueeze(1).squeeze(2) * 1.5; }, {{3, 1}}},
      {"flatten", [](auto& x) { return x[0].flatten(); }, {{2, 3, 2}}},
      {"contiguous", [](auto& x) { return x[0].t().contiguous(); }, {{3, 4}}},
      {"clone", [](auto& x) { return x[0].clone() * x[0]; }, {{3, 4}}},
      {"cat", [](auto& x) { return cat({x[0], x[1]}, 1); }, {{3, 2}, {3, 4}}},
      {"stack", [](auto& x) { return stack({x[0], x[1] * 2.0}, 2); }, {{3, 2}, {3, 2}}},
      {"split", [](auto& x) { return split(x[0], 2, 1)[1] * split(x[0], 2, 1)[0]; }, {{3, 4}}},
      {"chunk", [](auto& x) { return chunk(x[0], 3, 0)[2]; }, {{5, 2}}},
      {"split_partly_used", [](auto& x) { return split(x[0], {1, 2, 1}, 1)[1] * 2.0; }, {{3, 4}}},
      {"unbind", [](auto& x) { TensorList r = unbind(x[0], 1); return r[0] * r[2] + r[1]; }, {{3, 3}}},
      // composites across several ops
      {"layer_norm_by_hand",
       [](auto& x) {
         Tensor mu = mean(x[0], {-1}, true);
         return (x[0] - mu) * rsqrt(var(x[0], {-1}, 0, true) + 1e-5) * x[1];
       },
       {{3, 5}, {5}}},
  };
}

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class Gradcheck : public ::testing::TestWithParam<Case> {};

TEST_P(Gradcheck, MatchesFiniteDifferences) {
  const Case& c = GetParam();
  autograd::GradcheckResult r = gradcheck(c.fn, inputs_for(c, 11));
  EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
}

INSTANTIATE_TEST_SUITE_P(AllOps, Gradcheck, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

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
