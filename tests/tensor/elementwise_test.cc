// Elementwise ops against std:: references computed in double, on contiguous
// rows (the Eigen path) and on transposed views (the strided path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "tensor/cpu/vector_math.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> reference;
  double low, high;  // input range
};

double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::abs(x); }, -3, 3},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -3, 3},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, 0.5, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01, 10},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 10},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.1, 10},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -4, 4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -6, 6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_erf, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }, gelu_tanh, -4, 4},
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); }, [](double x) { return std::pow(x, 2.5); }, 0, 3},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 1.0); },
       [](double x) { return std::min(1.0, std::max(-0.5, x)); }, -2, 2},
  };
}

class UnaryOps : public ::testing::TestWithParam<DType> {};

TEST_P(UnaryOps, MatchStdReferenceOnContiguousAndStridedInputs) {
  const DType dtype = GetParam();
  const double tol = dtype == kFloat32 ? 2e-6 : 1e-12;
  for (const UnaryCase& c : unary_cases()) {
    Generator gen(42);
    // 37 x 41: rows long enough for the vector path, odd sizes for its tails.
    Tensor x = uniform({37, 41}, c.low, c.high, {.dtype = dtype}, &gen);
    for (const Tensor& input : {x, x.t()}) {
      Tensor y = c.op(input);
      ASSERT_EQ(y.shape(), input.shape()) << c.name;
      ASSERT_EQ(y.dtype(), dtype) << c.name;
      std::vector<double> in = values(input), out = values(y);
      for (size_t i = 0; i < in.size(); ++i) {
        double expected = c.reference(in[i]);
        ASSERT_NEAR(out[i], expected, tol * std::max(1.0, std::abs(expected)))
            << c.name << "(" << in[i] << ") at " << i << (input.is_contiguous() ? " contiguous" : " strided");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Float, UnaryOps, ::testing::Values(kFloat32, kFloat64));

TEST(Unary, KnownValues) {
  EXPECT_NEAR(gelu(full({}, 1.0, {.dtype = kFloat64})).item(), 0.8413447460685429, 1e-12);
  EXPECT_NEAR(gelu(full({}, 1.0, {.dtype = kFloat64}), GeluApproximation::Tanh).item(), 0.8411919906082768, 1e-12);
  expect_values(sign(from_vector<float>({-2, 0, 3})), {-1, 0, 1});
  expect_values(abs(from_vector<int64_t>({-2, 5})), {2, 5});
  expect_values(logical_not(from_vector<bool>({true, false})), {0, 1});
}

// GELU's tanh form, differentiated by hand in double, against its forward
// and backward in float32 and float64, for a full incoming gradient and a
// broadcast one. A contiguous float32 input that needs a gradient takes the
// one-pass kernel that writes gelu(x) and gelu'(x) (Backend::
// unary_with_derivative, 1517 values: a masked last vector); a transposed
// view, and float64, the forward and a backward from x.
TEST(Unary, GeluTanhGradientMatchesItsDerivative) {
  auto value = [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); };
  auto derivative = [](double x) {
    const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  };
  for (DType dtype : {kFloat32, kFloat64}) {
    Generator gen(43);
    const Tensor x = uniform({37, 41}, -4, 4, {.dtype = dtype}, &gen);
    const Tensor dy = uniform({37, 41}, -2, 2, {.dtype = dtype}, &gen);
    const double tolerance = dtype == kFloat32 ? 4e-6 : 1e-12;
    for (bool transposed : {false, true}) {
      for (bool broadcast : {false, true}) {
        const std::string where = std::string(dtype_name(dtype)) + (transposed ? " transposed" : "") +
                                  (broadcast ? " broadcast" : "");
        Tensor leaf = x.clone().requires_grad_(true);
        // Element (i, j) of y is gelu(x(i, j)) either way; so is its dy.
        Tensor y = transposed ? gelu(leaf.t(), GeluApproximation::Tanh).t() : gelu(leaf, GeluApproximation::Tanh);
        (broadcast ? y.sum() : (y * dy).sum()).backward();
        const std::vector<double> in = values(x), g = values(dy), out = values(y.detach()), got = values(leaf.grad());
        for (size_t i = 0; i < in.size(); ++i) {
          ASSERT_NEAR(out[i], value(in[i]), tolerance * std::max(1.0, std::abs(value(in[i]))))
              << where << " gelu at x = " << in[i];
          const double expected = derivative(in[i]) * (broadcast ? 1.0 : g[i]);
          ASSERT_NEAR(got[i], expected, tolerance * std::max(1.0, std::abs(expected)))
              << where << " gradient at x = " << in[i];
        }
      }
    }
  }
}

// float32 sqrt and rsqrt are correctly rounded in vector lanes as in the
// scalar tail and on strided views: bit for bit std::sqrt(x) and
// 1 / std::sqrt(x) (Eigen's own vector forms are estimates refined by a
// Newton step, a last bit apart).
TEST(Unary, Float32SqrtAndRsqrtAreCorrectlyRoundedInEveryLane) {
  Generator gen(44);
  const Tensor x = uniform({37, 41}, 1e-3, 1e3, {}, &gen);
  for (const Tensor& input : {x, x.t()}) {
    const std::vector<double> in = values(input), root = values(sqrt(input)), inverse = values(rsqrt(input));
    int64_t root_off = 0, inverse_off = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const float v = static_cast<float>(in[i]);
      root_off += static_cast<float>(root[i]) != std::sqrt(v);
      inverse_off += static_cast<float>(inverse[i]) != 1.0f / std::sqrt(v);
    }
    EXPECT_EQ(root_off, 0) << (input.is_contiguous() ? "contiguous" : "strided");
    EXPECT_EQ(inverse_off, 0) << (input.is_contiguous() ? "contiguous" : "strided");
  }
}

// exp8, the float32 exponential of GELU and the CPU attention, against
// std::exp in float64: within 2 units in the last place on every 257th
// float of its range [-87, 88]; beyond it clamped to e^-87 and e^88
// (normal numbers); NaN stays NaN.
TEST(VectorExp, Exp8IsWithinTwoUlpOfExp) {
#ifndef __AVX2__
  GTEST_SKIP() << "exp8 is the AVX2 build's";
#else
  auto exp8_of = [](const std::vector<float>& x) {
    std::vector<float> y(x.size());
    for (size_t i = 0; i < x.size(); i += 8) _mm256_storeu_ps(&y[i], cpu::exp8(_mm256_loadu_ps(&x[i])));
    return y;
  };
  auto ulp_error = [](float got, double want) {
    const float rounded = static_cast<float>(want);
    return std::abs(got - want) / (std::nextafter(rounded, std::numeric_limits<float>::infinity()) - rounded);
  };
  std::vector<float> x;
  for (float end : {88.0f, -87.0f}) {  // the positive floats, then the negative ones
    uint32_t last;
    std::memcpy(&last, &end, sizeof last);
    for (uint32_t bits = end > 0 ? 0 : 0x80000000u; bits <= last; bits += 257) {
      float value;
      std::memcpy(&value, &bits, sizeof value);
      x.push_back(value);
    }
  }
  x.resize(x.size() / 8 * 8);
  const std::vector<float> y = exp8_of(x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double error = ulp_error(y[i], std::exp(static_cast<double>(x[i])));
    ASSERT_LE(error, 2.0) << "exp8(" << x[i] << ") = " << y[i];
    worst = std::max(worst, error);
  }
  EXPECT_GT(worst, 0.5) << "the sweep compares something";

  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ends = exp8_of({std::nanf(""), -inf, -1000, -87, inf, 1000, 88, 0});
  EXPECT_TRUE(std::isnan(ends[0]));
  for (int i : {1, 2}) EXPECT_EQ(ends[i], ends[3]) << "below -87 is e^-87";
  EXPECT_GE(ends[3], std::numeric_limits<float>::min()) << "a normal number";
  EXPECT_LE(ulp_error(ends[3], std::exp(-87.0)), 2.0);
  for (int i : {4, 5}) EXPECT_EQ(ends[i], ends[6]) << "above 88 is e^88";
  EXPECT_LE(ulp_error(ends[6], std::exp(88.0)), 2.0);
  EXPECT_EQ(ends[7], 1.0f);
#endif
}

// exp_shifted computes n elements, all by exp8, and touches nothing after them.
TEST(VectorExp, ExpShiftedWritesTheFirstNOnly) {
#ifndef __AVX2__
  GTEST_SKIP() << "exp_shifted is the AVX2 build's";
#else
  for (int64_t n = 0; n <= 17; ++n) {
    std::vector<float> x(24);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * static_cast<float>(i) - 2;
    std::vector<float> expected = x;
    for (int64_t i = 0; i < n; i += 8) {  // each element as exp8 computes it
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(&x[i]), _mm256_set1_ps(1.5f))));
      for (int64_t j = i; j < std::min(n, i + 8); ++j) expected[j] = lanes[j - i];
    }
    cpu::exp_shifted(x.data(), n, 1.5f);
    EXPECT_EQ(x, expected) << "n = " << n;
  }
#endif
}

TEST(Unary, IntegerInputsOfFloatOpsPromote) {
  Tensor y = exp(from_vector<int64_t>({0, 1}));
  EXPECT_EQ(y.dtype(), kFloat32);
  expect_values(y, {1, std::exp(1.0)});
  EXPECT_THROW_MSG(neg(from_vector<bool>({true})), "neg: not defined for bool tensors");
  EXPECT_THROW_MSG(clamp(zeros({2}), 2, 1), "clamp: min 2 is above max 1");
}

// Binary ops: out[i, j] against the reference on the broadcast values.
void check_binary(const std::function<Tensor(const Tensor&, const Tensor&)>& op,
                  const std::function<double(double, double)>& ref, const Tensor& a, const Tensor& b,
                  const Shape& expected_shape) {
  Tensor y = op(a, b);
  ASSERT_EQ(y.shape(), expected_shape);
  std::vector<double> av = values(a.expand(expected_shape.vec()).contiguous());
  std::vector<double> bv = values(b.expand(expected_shape.vec()).contiguous());
  std::vector<double> yv = values(y);
  for (size_t i = 0; i < yv.size(); ++i) {
    double expected = ref(av[i], bv[i]);
    ASSERT_NEAR(yv[i], expected, 1e-5 * std::max(1.0, std::abs(expected))) << "element " << i;
  }
}

TEST(Binary, BroadcastingAndStridesAgainstReference) {
  Generator gen(1);
  Tensor m = uniform({5, 7}, 0.5, 2, {}, &gen);
  Tensor row = uniform({7}, 0.5, 2, {}, &gen);
  Tensor col = uniform({5, 1}, 0.5, 2, {}, &gen);
  Tensor scalar = full({}, 1.5);
  Tensor mt = uniform({7, 5}, 0.5, 2, {}, &gen).t();  // a strided (5, 7)
  struct Case {
    std::function<Tensor(const Tensor&, const Tensor&)> op;
    std::function<double(double, double)> ref;
  };
  std::vector<Case> cases = {
      {[](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {[](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {[](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {[](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }},
      {[](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }, [](double a, double b) { return a + 0.5 * b; }},
      {[](const Tensor& a, const Tensor& b) { return pow(a, b); }, [](double a, double b) { return std::pow(a, b); }},
      {[](const Tensor& a, const Tensor& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }},
      {[](const Tensor& a, const Tensor& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }},
      {[](const Tensor& a, const Tensor& b) { return lerp(a, b, 0.25); }, [](double a, double b) { return a + 0.25 * (b - a); }},
      {[](const Tensor& a, const Tensor& b) { return (a < b).to(kFloat32); }, [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {[](const Tensor& a, const Tensor& b) { return (a >= b).to(kFloat32); }, [](double a, double b) { return a >= b ? 1.0 : 0.0; }},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    check_binary(cases[i].op, cases[i].ref, m, row, {5, 7});
    check_binary(cases[i].op, cases[i].ref, row, m, {5, 7});
    check_binary(cases[i].op, cases[i].ref, col, row, {5, 7});
    check_binary(cases[i].op, cases[i].ref, m, scalar, {5, 7});
    check_binary(cases[i].op, cases[i].ref, scalar, m, {5, 7});
    check_binary(cases[i].op, cases[i].ref, m, mt, {5, 7});
    check_binary(cases[i].op, cases[i].ref, mt.narrow(1, 1, 3), col, {5, 3});
  }
}

TEST(Binary, TypePromotion) {
  Tensor i = from_vector<int64_t>({1, 2, 3});
  Tensor f = from_vector<float>({0.5f, 0.5f, 0.5f});
  EXPECT_EQ((i + f).dtype(), kFloat32);
  EXPECT_EQ((i + 1.0).dtype(), kInt64);    // a whole scalar keeps the tensor's dtype
  EXPECT_EQ((i * 0.5).dtype(), kFloat32);  // a fractional one needs floats
  expect_values(i * 0.5, {0.5, 1.0, 1.5});
  EXPECT_EQ((i / from_vector<int64_t>({2, 2, 2})).dtype(), kFloat32);  // true division
  expect_values(i / from_vector<int64_t>({2, 2, 2}), {0.5, 1.0, 1.5});
  EXPECT_EQ((f + from_vector<double>({1, 1, 1})).dtype(), kFloat64);
  EXPECT_EQ((i == 2.0).dtype(), kBool);
  expect_values(i == 2.0, {0, 1, 0});
  Tensor mask = from_vector<bool>({true, false, true});
  expect_values(f * mask, {0.5, 0, 0.5});  // bool promotes to the float side
  EXPECT_THROW_MSG(mask + mask, "add: arithmetic on two bool tensors is not supported");
}

TEST(Binary, ShapeErrorsNameTheOpAndShapes) {
  EXPECT_THROW_MSG(zeros({2, 3}) + zeros({3, 2}), "add: shapes [2, 3] and [3, 2] do not broadcast");
  EXPECT_THROW_MSG(mul(zeros({4}), zeros({5})), "mul: shapes [4] and [5] do not broadcast");
  EXPECT_THROW_MSG(zeros({2}) + Tensor(), "add: got an undefined tensor");
}

// NaN as PyTorch treats it, on contiguous rows (Eigen's SIMD path, whose
// max returns whichever operand its instruction picks) and strided views:
// maximum and minimum return it from either side, relu keeps it, and relu's
// gradient is 0 wherever the output is <= 0, even where dy is NaN.
TEST(Binary, NaNPropagatesAsInPyTorch) {
  // The pattern 9 times over: whole SIMD registers and a tail.
  auto repeated = [](const std::vector<double>& pattern) {
    std::vector<double> out;
    for (int k = 0; k < 9; ++k) out.insert(out.end(), pattern.begin(), pattern.end());
    return out;
  };
  auto expect_same = [](const Tensor& t, const std::vector<double>& expected, const char* what) {
    const std::vector<double> got = values(t);
    ASSERT_EQ(got.size(), expected.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(expected[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << what << ", element " << i << ": " << got[i];
      } else {
        EXPECT_EQ(got[i], expected[i]) << what << ", element " << i;
      }
    }
  };
  for (bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "strided" : "contiguous");
    auto make = [&](const std::vector<double>& pattern) {
      Tensor t = from_vector<double>(repeated(pattern), {9, 4}).to(kFloat32);
      return strided ? t.t().contiguous().t() : t;  // the same values, column-major
    };
    Tensor a = make({NAN, 1, 2, NAN}), b = make({1, NAN, 3, NAN});
    expect_same(maximum(a, b), repeated({NAN, NAN, 3, NAN}), "maximum");
    expect_same(minimum(a, b), repeated({NAN, NAN, 2, NAN}), "minimum");
    Tensor x = make({NAN, -1, 2, 0}).requires_grad_(true);
    Tensor y = relu(x);
    expect_same(y, repeated({NAN, 0, 2, 0}), "relu");
    y.backward(make({1, NAN, 1, 1}));
    expect_same(x.grad(), repeated({1, 0, 1, 0}), "relu gradient");
  }
}

// Floating values become uint8 through int64, as in PyTorch: negative ones
// wrap instead of being undefined (GCC's code wrapped, nvcc's clamped).
TEST(Conversions, FloatsToUint8WrapThroughInt64) {
  expect_values(from_vector<float>({-1, -2.5, 300, 255.9, 7}).to(kUInt8), {255, 254, 44, 255, 7});
  expect_values(from_vector<double>({-1, 256}, {2, 1}).expand({2, 3}).to(kUInt8), {255, 255, 255, 0, 0, 0});
  expect_values(full({3}, -3.0, {.dtype = kUInt8}), {253, 253, 253});
}

TEST(Binary, LogicalOps) {
  Tensor a = from_vector<bool>({true, true, false, false});
  Tensor b = from_vector<bool>({true, false, true, false});
  expect_values(logical_and(a, b), {1, 0, 0, 0});
  expect_values(logical_or(a, b), {1, 1, 1, 0});
}

TEST(Selection, WhereAndMaskedFill) {
  Tensor cond = from_vector<bool>({true, false, true}, {3, 1});
  Tensor a = from_vector<float>({1, 2}, {1, 2});
  Tensor b = full({3, 2}, -1);
  expect_values(where(cond, a, b), {1, 2, -1, -1, 1, 2});
  Tensor x = arange(0, 4, 1).reshape({2, 2});
  expect_values(masked_fill(x, from_vector<bool>({false, true}), -INFINITY), {0, -INFINITY, 2, -INFINITY});
  EXPECT_THROW_MSG(where(from_vector<float>({1}), a, b), "where: the condition must be bool, got float32");
  EXPECT_THROW_MSG(masked_fill(x, zeros({2, 2}), 0), "masked_fill: the mask must be bool, got float32");
  EXPECT_THROW_MSG(masked_fill(x, from_vector<bool>({true, false, true}), 0),
                   "masked_fill: mask of shape [3] does not broadcast to the tensor's shape [2, 2]");
}

TEST(Selection, AllClose) {
  Tensor a = from_vector<float>({1, 2, 3});
  EXPECT_TRUE(allclose(a, a + 1e-7));
  EXPECT_FALSE(allclose(a, a + 1e-3));
  EXPECT_FALSE(allclose(from_vector<float>({NAN}), from_vector<float>({NAN})));
}

}  // namespace
}  // namespace loom
