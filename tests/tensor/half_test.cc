// bfloat16 and float16: conversions against hand-computed bit patterns and
// against a brute-force nearest-value reference, the dtypes' rules, and
// tensors that hold them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <limits>
#include <random>
#include <vector>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::values;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(BFloat16, BitPatternsByHand) {
  EXPECT_EQ(float_to_bfloat16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16_bits(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bfloat16_bits(3.14159265f), 0x4049);  // 3.140625
  EXPECT_EQ(float_to_bfloat16_bits(-0.0f), 0x8000);
  // Ties go to the even neighbour; just above a tie goes up.
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x3F808000)), 0x3F80);
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x3F818000)), 0x3F82);
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x3F808001)), 0x3F81);
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x3F807FFF)), 0x3F80);
  // Subnormal floats round like the rest.
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x00008000)), 0x0000);
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x00018000)), 0x0002);
  // Infinities stay; the largest float rounds up to infinity; NaN stays NaN,
  // even one whose payload sits only in the bits that are dropped.
  EXPECT_EQ(float_to_bfloat16_bits(INFINITY), 0x7F80);
  EXPECT_EQ(float_to_bfloat16_bits(-INFINITY), 0xFF80);
  EXPECT_EQ(float_to_bfloat16_bits(from_bits(0x7F7FFFFF)), 0x7F80);
  EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(from_bits(0x7F800001)))));
  EXPECT_TRUE(std::isnan(bfloat16_bits_to_float(float_to_bfloat16_bits(std::nanf("")))));
  EXPECT_EQ(bfloat16_bits_to_float(0x4049), 3.140625f);
  EXPECT_EQ(bfloat16_bits_to_float(0x0001), from_bits(0x00010000));
}

TEST(Float16, BitPatternsByHand) {
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half_bits(-2.5f), 0xC100);
  EXPECT_EQ(float_to_half_bits(0.1f), 0x2E66);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7BFF);  // the largest half
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7C00);  // the tie above it rounds to even: infinity
  EXPECT_EQ(float_to_half_bits(1e6f), 0x7C00);
  EXPECT_EQ(float_to_half_bits(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_half_bits(INFINITY), 0x7C00);
  // 1 + 2^-11 is halfway between 1 (even) and 1 + 2^-10; 1 + 3 * 2^-11 between 0x3C01 and 0x3C02 (even).
  EXPECT_EQ(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  // Subnormals, in units of 2^-24: the smallest, ties to even, the largest,
  // and the smallest normal (2^-14).
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half_bits(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_half_bits(-5 * std::ldexp(1.0f, -25)), 0x8002);
  EXPECT_EQ(float_to_half_bits(1023 * std::ldexp(1.0f, -24)), 0x03FF);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(std::nanf("")))));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(from_bits(0x7F800001)))));
  EXPECT_EQ(half_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(half_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_bits_to_float(0xFC00), -INFINITY);
  EXPECT_EQ(half_bits_to_float(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(half_bits_to_float(0x8000)));
}

// Every non-NaN 16-bit pattern survives the trip through float.
TEST(HalfFormats, EveryValueRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float h = half_bits_to_float(bits), bf = bfloat16_bits_to_float(bits);
    if (!std::isnan(h)) {
      EXPECT_EQ(float_to_half_bits(h), bits) << std::hex << b;
    }
    if (!std::isnan(bf)) {
      EXPECT_EQ(float_to_bfloat16_bits(bf), bits) << std::hex << b;
    }
  }
}

// Random floats of every magnitude against the nearest finite value found by
// search over all of them (ties to the even pattern; past the largest value
// by half an ulp or more, infinity).
void expect_nearest(uint16_t (*convert)(float), float (*back)(uint16_t), double max_finite, double top_ulp) {
  std::vector<std::pair<double, uint16_t>> finite;  // non-negative finite values, ascending
  for (uint32_t b = 0; b < 0x8000; ++b) {
    const double v = back(static_cast<uint16_t>(b));
    if (std::isfinite(v)) finite.emplace_back(v, static_cast<uint16_t>(b));
  }
  std::sort(finite.begin(), finite.end());
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_float(0, 0x7F7FFFFF);
  for (int i = 0; i < 200000; ++i) {
    const float x = from_bits(any_float(rng));
    uint16_t expected;
    if (x >= max_finite + top_ulp / 2) {
      expected = convert(INFINITY);
    } else {
      auto hi = std::lower_bound(finite.begin(), finite.end(), std::make_pair(double(x), uint16_t(0)));
      if (hi == finite.end()) hi = finite.end() - 1;
      auto lo = hi == finite.begin() ? hi : hi - 1;
      const double dl = x - lo->first, dh = hi->first - x;
      expected = dl < dh ? lo->second : dh < dl ? hi->second : ((lo->second & 1) == 0 ? lo->second : hi->second);
    }
    ASSERT_EQ(convert(x), expected) << "x = " << x;
  }
}

TEST(HalfFormats, RoundToNearestEvenAgainstSearch) {
  expect_nearest(float_to_half_bits, half_bits_to_float, 65504.0, 32.0);
  expect_nearest(float_to_bfloat16_bits, bfloat16_bits_to_float, double(from_bits(0x7F7F0000)),
                 std::ldexp(1.0, 127 - 7));
}

TEST(HalfFormats, DTypeRules) {
  EXPECT_EQ(element_size(kBFloat16), 2u);
  EXPECT_EQ(element_size(kFloat16), 2u);
  EXPECT_STREQ(dtype_name(kBFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(kFloat16), "float16");
  EXPECT_TRUE(is_floating(kBFloat16) && is_floating(kFloat16));
  // As torch.promote_types.
  EXPECT_EQ(promote_types(kBFloat16, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kFloat16, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kBFloat16, kFloat16), kFloat32);
  EXPECT_EQ(promote_types(kInt64, kBFloat16), kBFloat16);
  EXPECT_EQ(promote_types(kFloat16, kBool), kFloat16);
  EXPECT_EQ(promote_types(kBFloat16, kBFloat16), kBFloat16);
  EXPECT_EQ(promote_types(kUInt8, kInt64), kInt64);
}

TEST(HalfTensors, CreateConvertPrint) {
  Tensor b = full({3}, 1.5, {.dtype = kBFloat16});
  EXPECT_EQ(b.dtype(), kBFloat16);
  EXPECT_EQ(b.nbytes(), 6);
  EXPECT_EQ(b.select(0, 1).item(), 1.5);

  const std::vector<float> xs = {3.14159265f, 65520.0f, -1e-6f, INFINITY, 0.1f};
  Tensor x = from_vector<float>(xs, {5});
  for (DType dtype : {kBFloat16, kFloat16}) {
    Tensor h = x.to(dtype);
    EXPECT_EQ(h.dtype(), dtype);
    const std::vector<double> got = values(h.to(kFloat64));
    for (size_t i = 0; i < xs.size(); ++i) {
      const float expected = dtype == kBFloat16 ? bfloat16_bits_to_float(float_to_bfloat16_bits(xs[i]))
                                                : half_bits_to_float(float_to_half_bits(xs[i]));
      EXPECT_EQ(got[i], expected) << dtype << " " << xs[i];
    }
    // float16 <-> bfloat16 goes through float32.
    Tensor other = h.to(dtype == kBFloat16 ? kFloat16 : kBFloat16);
    EXPECT_EQ(values(other.to(kFloat32)), values(h.to(kFloat32).to(other.dtype()).to(kFloat32)));
  }
  std::ostringstream printed;
  printed << x.to(kBFloat16);
  EXPECT_NE(printed.str().find("3.1406"), std::string::npos) << printed.str();
  EXPECT_NE(printed.str().find("bfloat16"), std::string::npos) << printed.str();
}

// On the CPU every op on 16-bit tensors computes in float32 and rounds once:
// its result is the float32 op on the same values, rounded to the dtype.
TEST(HalfTensors, OpsComputeInFloat32AndRoundOnce) {
  Generator gen(21);
  for (DType dtype : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    Tensor a = randn({4, 6}, {}, &gen).to(dtype), b = randn({4, 6}, {}, &gen).to(dtype);
    Tensor m = randn({6, 5}, {}, &gen).to(dtype), w = randn({6}, {}, &gen).to(dtype);
    Tensor img = randn({2, 3, 6, 6}, {}, &gen).to(dtype), kernel = randn({4, 3, 3, 3}, {}, &gen).to(dtype);
    Tensor idx = from_vector<int64_t>({2, 0, 3}, {3});
    using Op = std::function<Tensor(const TensorList&)>;
    const std::vector<std::pair<std::string, Op>> ops = {
        {"exp", [](const TensorList& t) { return t[0].exp(); }},
        {"tanh", [](const TensorList& t) { return tanh(t[0]); }},
        {"relu", [](const TensorList& t) { return relu(t[0]); }},
        {"gelu", [](const TensorList& t) { return gelu(t[0]); }},
        {"add", [](const TensorList& t) { return t[0] + t[1]; }},
        {"mul", [](const TensorList& t) { return t[0] * t[1]; }},
        {"div", [](const TensorList& t) { return t[0] / t[1]; }},
        {"where", [](const TensorList& t) { return where(t[0] > t[1], t[0], t[1]); }},
        {"matmul", [](const TensorList& t) { return matmul(t[0], t[2]); }},
        {"sum", [](const TensorList& t) { return sum(t[0], {0}); }},
        {"mean", [](const TensorList& t) { return mean(t[0], {1}); }},
        {"var", [](const TensorList& t) { return var(t[0], {0}); }},
        {"amax", [](const TensorList& t) { return amax(t[0], {1}); }},
        {"softmax", [](const TensorList& t) { return softmax(t[0], 1); }},
        {"log_softmax", [](const TensorList& t) { return log_softmax(t[0], 1); }},
        {"layer_norm", [](const TensorList& t) { return nn::functional::layer_norm(t[0], {6}, t[3], t[3]); }},
        {"index_select", [](const TensorList& t) { return index_select(t[0], 0, t[6]); }},
        {"conv2d", [](const TensorList& t) { return nn::functional::conv2d(t[4], t[5]); }},
        {"max_pool2d", [](const TensorList& t) {
           return nn::functional::max_pool2d(t[4], {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2});
         }},
    };
    const TensorList narrow = {a, b, m, w, img, kernel, idx};
    TensorList wide;
    for (const Tensor& t : narrow) wide.push_back(t.dtype() == kInt64 ? t : t.to(kFloat32));
    for (const auto& [name, op] : ops) {
      Tensor got = op(narrow), expected = op(wide);
      EXPECT_EQ(got.dtype(), dtype) << name;
      EXPECT_EQ(values(got), values(expected.to(dtype))) << name;
    }
  }
}

// Layer norm keeps its statistics in float32 for 16-bit inputs, as PyTorch
// does: its gradients are the float32 op's, rounded once, even for rows whose
// mean is large against their spread (a bfloat16 mean near 100 is off by up
// to 0.25, a quarter of these rows' standard deviation).
TEST(HalfTensors, LayerNormGradientsAreTheFloat32OnesRounded) {
  Generator gen(24);
  for (DType dtype : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    Tensor x = (randn({4, 64}, {}, &gen) + 100).to(dtype), w = randn({64}, {}, &gen).to(dtype);
    Tensor dy = randn({4, 64}, {}, &gen).to(dtype);
    auto grads = [](const Tensor& x0, const Tensor& w0, const Tensor& dy0) {
      Tensor xl = x0.detach().requires_grad_(), wl = w0.detach().requires_grad_();
      nn::functional::layer_norm(xl, {64}, wl, Tensor()).backward(dy0);
      return std::make_pair(xl.grad(), wl.grad());
    };
    const auto [dx16, dw16] = grads(x, w, dy);
    const auto [dx32, dw32] = grads(x.to(kFloat32), w.to(kFloat32), dy.to(kFloat32));
    EXPECT_EQ(values(dx16), values(dx32.to(dtype)));
    EXPECT_EQ(values(dw16), values(dw32.to(dtype)));
  }
}

// A step of Adam on 16-bit parameters, gradients and state is the float32
// step on the same values, each result rounded once.
TEST(HalfTensors, AdamStepRoundsOnce) {
  Generator gen(22);
  Tensor p16 = randn({50}, {}, &gen).to(kBFloat16).requires_grad_();
  Tensor p32 = p16.detach().to(kFloat32).requires_grad_();
  Tensor g = randn({50}, {}, &gen).to(kBFloat16);
  p16.set_grad(g);
  p32.set_grad(g.to(kFloat32));
  optim::Adam a16({p16}, {.lr = 1e-2}), a32({p32}, {.lr = 1e-2});
  a16.step();
  a32.step();
  EXPECT_EQ(values(p16), values(p32.detach().to(kBFloat16)));
}

// Gradients flow through 16-bit ops: a bfloat16 linear regression learns.
TEST(HalfTensors, TrainingInBFloat16ReducesTheLoss) {
  Generator gen(23);
  Tensor x = randn({64, 8}, {}, &gen), true_w = randn({8, 1}, {}, &gen);
  Tensor y = matmul(x, true_w).to(kBFloat16);
  x = x.to(kBFloat16);
  Tensor w = zeros({8, 1}, {.dtype = kBFloat16, .requires_grad = true});
  optim::SGD opt({w}, {.lr = 0.1});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    Tensor loss = (matmul(x, w) - y).square().mean();
    EXPECT_EQ(loss.dtype(), kBFloat16);
    opt.zero_grad();
    loss.backward();
    EXPECT_EQ(w.grad().dtype(), kBFloat16);
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.05 * first);
}

}  // namespace
}  // namespace loom
