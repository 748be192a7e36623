// GradScaler: unscaled gradients, a skipped step on inf or NaN, and the
// scale's halving and growth.
#include "optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "nn/nn.h"
#include "tensor/backend.h"
#include "tests/test_util.h"

namespace loom::optim {
namespace {

using testing::values;

TEST(GradScaler, ScalesTheLossAndUnscalesTheGradients) {
  Tensor w = from_vector<float>({1.5f, -2.0f}, {2}).requires_grad_();
  SGD opt({w}, {.lr = 0.1});
  GradScaler scaler({.init_scale = 1024.0});
  Tensor loss = (w * w).sum();  // gradient 2w
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item(), 1024.0 * loss.item());
  scaled.backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3.0 * 1024, -4.0 * 1024}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3.0, -4.0}));  // unscaled before the step
  testing::expect_values(w, {1.5 - 0.3, -2.0 + 0.4}, 1e-6);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1024.0);
}

// The fused pass under unscale_: each gradient times inv_scale, in its
// compute type and rounded once (float32 for bfloat16), and a flag raised on
// a non-finite result and never lowered.
TEST(GradScaler, UnscaleAndCheckFiniteIsOnePassOverEveryDtype) {
  const double inv = 1.0 / 3.0;  // not a power of two: the rounding shows
  Tensor f32 = from_vector<float>({3, -1.5f, 7}), f64 = from_vector<double>({0.1, 2}, {2});
  Tensor bf16 = from_vector<float>({1.5f, 10, -3}).to(kBFloat16);
  const Tensor expected_f32 = f32 * static_cast<float>(inv), expected_f64 = f64 * inv;
  const Tensor expected_bf16 = (bf16.to(kFloat32) * static_cast<float>(inv)).to(kBFloat16);
  Tensor flag = zeros({1});
  Backend& cpu = backend_for(Device::cpu());
  cpu.unscale_and_check_finite({f32, f64, bf16}, inv, flag);
  EXPECT_EQ(values(f32), values(expected_f32));
  EXPECT_EQ(values(f64), values(expected_f64));
  EXPECT_EQ(values(bf16), values(expected_bf16));
  EXPECT_EQ(flag.item(), 0) << "every result is finite";

  Tensor bad = from_vector<float>({1, NAN});
  cpu.unscale_and_check_finite({f32, bad}, 1.0, flag);
  EXPECT_EQ(flag.item(), 1);
  cpu.unscale_and_check_finite({f32}, 1.0, flag);
  EXPECT_EQ(flag.item(), 1) << "the flag is raised, never lowered";
  // Finite gradients whose unscaled value overflows count too.
  Tensor huge = full({2}, 3e38f), flag2 = zeros({1});
  cpu.unscale_and_check_finite({huge}, 2.0, flag2);
  EXPECT_EQ(flag2.item(), 1);

  EXPECT_THROW_MSG(cpu.unscale_and_check_finite({zeros({3, 2}).t()}, 1.0, zeros({1})),
                   "unscale_and_check_finite: gradient 0 is not contiguous");
  EXPECT_THROW_MSG(cpu.unscale_and_check_finite({zeros({2}, {.dtype = kInt64})}, 1.0, zeros({1})),
                   "gradient 0 is int64; expected a floating-point tensor");
  EXPECT_THROW_MSG(cpu.unscale_and_check_finite({f32}, 1.0, zeros({1}, {.dtype = kFloat64})),
                   "found_inf must be one float32 element");
}

// A strided gradient (here a transposed one) is made contiguous for the
// fused pass, and unscaled like any other.
TEST(GradScaler, UnscalesAStridedGradient) {
  Tensor w = zeros({2, 3}).requires_grad_();
  SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 4.0});
  w.set_grad(from_vector<float>({4, 8, 12, 16, 20, 24}, {3, 2}).t());
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(values(w), (std::vector<double>{-1, -3, -5, -2, -4, -6}));
}

TEST(GradScaler, SkipsTheStepOnInfOrNaNAndHalvesTheScale) {
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    Tensor a = ones({3}).requires_grad_(), b = ones({2}).requires_grad_();
    SGD opt({a, b}, {.lr = 0.1});
    GradScaler scaler({.init_scale = 256.0});
    a.set_grad(from_vector<float>({1, 2, 3}, {3}));
    b.set_grad(from_vector<float>({bad, 5}, {2}));  // one bad value in one tensor of two
    EXPECT_FALSE(scaler.step(opt)) << bad;
    EXPECT_TRUE(scaler.found_inf());
    EXPECT_EQ(values(a), (std::vector<double>{1, 1, 1})) << "no parameter moved";
    EXPECT_EQ(values(b), (std::vector<double>{1, 1}));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 128.0);
  }
}

// Two optimizers, as PyTorch's GradScaler takes them: each skips only on its
// own bad gradients, and update() backs off if either had one.
TEST(GradScaler, SeveralOptimizersSkipOnTheirOwnGradients) {
  Tensor a = ones({2}).requires_grad_(), b = ones({2}).requires_grad_();
  SGD opt_a({a}, {.lr = 0.5}), opt_b({b}, {.lr = 0.5});
  GradScaler scaler({.init_scale = 4.0});
  a.set_grad(full({2}, 4.0f));  // 1 once unscaled
  b.set_grad(from_vector<float>({INFINITY, 4}, {2}));
  scaler.unscale_(opt_a);
  scaler.unscale_(opt_b);
  EXPECT_THROW_MSG(scaler.unscale_(opt_a), "already called for this optimizer since the last update()");
  EXPECT_TRUE(scaler.step(opt_a));
  EXPECT_FALSE(scaler.step(opt_b));
  EXPECT_EQ(values(a), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(values(b), (std::vector<double>{1, 1}));
  EXPECT_TRUE(scaler.found_inf());
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2.0);
  // The next step: both finite, both step (step() unscales each itself).
  a.set_grad(full({2}, 2.0f));
  b.set_grad(full({2}, 2.0f));
  EXPECT_TRUE(scaler.step(opt_a));
  EXPECT_TRUE(scaler.step(opt_b));
  EXPECT_FALSE(scaler.found_inf());
  EXPECT_EQ(values(a), (std::vector<double>{0, 0}));
  EXPECT_EQ(values(b), (std::vector<double>{0.5, 0.5}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2.0);
}

TEST(GradScaler, GrowsAfterGrowthIntervalGoodSteps) {
  Tensor w = ones({2}).requires_grad_();
  SGD opt({w}, {.lr = 0.0});
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 3});
  auto step_with = [&](float g) {
    w.set_grad(full({2}, g));
    scaler.step(opt);
    scaler.update();
  };
  step_with(1);
  step_with(1);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  step_with(1);
  EXPECT_EQ(scaler.get_scale(), 16.0);  // three good steps
  step_with(1);
  step_with(INFINITY);                  // resets the count and halves
  EXPECT_EQ(scaler.get_scale(), 8.0);
  step_with(1);
  step_with(1);
  EXPECT_EQ(scaler.get_scale(), 8.0);
  step_with(1);
  EXPECT_EQ(scaler.get_scale(), 16.0);
  EXPECT_THROW_MSG(scaler.update(), "GradScaler::update: call step() (or unscale_) first");
}

// Disabled, it passes through: the loss unscaled, the step taken, the scale untouched.
TEST(GradScaler, DisabledPassesThrough) {
  Tensor w = from_vector<float>({1.0f}, {1}).requires_grad_();
  SGD opt({w}, {.lr = 0.5});
  GradScaler scaler({.enabled = false});
  Tensor loss = (w * 3.0).sum();
  EXPECT_EQ(scaler.scale(loss).impl(), loss.impl());
  scaler.scale(loss).backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{3.0}));
  w.grad().fill_(INFINITY);  // not checked when disabled, as PyTorch's
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(values(w), (std::vector<double>{-INFINITY}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

// A float16 gradient too small for float16 survives because of the scale.
// (The scale is 2^14 here: at 2^16 the loss's own gradient, 65536, is past
// float16's largest value, and the first steps would be skipped while the
// scale backs off, which is what the scaler is for.)
TEST(GradScaler, KeepsSmallFloat16GradientsFromUnderflowing) {
  Tensor w = full({4}, 1.0).requires_grad_();
  Tensor x = full({4}, 1e-4).to(kFloat16);
  auto loss_of = [&] { return (w.to(kFloat16) * x * 1e-4).to(kFloat32).sum(); };  // d/dw = 1e-8: 0 in float16
  loss_of().backward();
  EXPECT_EQ(values(w.grad()), (std::vector<double>{0, 0, 0, 0})) << "unscaled: underflows";
  w.set_grad(Tensor());
  SGD opt({w}, {.lr = 1.0});
  GradScaler scaler({.init_scale = 16384.0});
  scaler.scale(loss_of()).backward();
  scaler.unscale_(opt);
  for (double g : values(w.grad())) EXPECT_NEAR(g, 1e-8, 1e-10);
}

// A capturable scaler keeps its scale and flags on the device (here: the
// CPU's memory, the same bookkeeping). Against the host-driven scaler, over
// steps where one gradient overflows (skip, halve) and good steps grow the
// scale back: the same parameters, scales and flags, step by step.
TEST(GradScaler, CapturableMatchesTheHostDrivenScalerThroughSkipsAndGrowth) {
  Tensor host_w = from_vector<float>({1.5f, -2.0f, 0.25f}).requires_grad_();
  Tensor device_w = from_vector<float>({1.5f, -2.0f, 0.25f}).requires_grad_();
  Adam host_opt({host_w}, {.lr = 0.01});
  Adam device_opt({device_w}, {.lr = 0.01, .capturable = true});
  GradScaler host_scaler({.init_scale = 256.0, .growth_interval = 2});
  GradScaler device_scaler({.init_scale = 256.0, .growth_interval = 2, .capturable = true});
  // Step 2's loss overflows float32 once scaled: its gradient is inf.
  const std::vector<float> factors = {1.0f, 1e37f, 1.0f, 2.0f, 0.5f, 1.0f};
  for (size_t step = 0; step < factors.size(); ++step) {
    for (auto* side : {&host_w, &device_w}) {
      GradScaler& scaler = side == &host_w ? host_scaler : device_scaler;
      Adam& opt = side == &host_w ? host_opt : device_opt;
      Tensor loss = ((*side) * (*side)).sum() * factors[step];
      opt.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    }
    EXPECT_EQ(values(device_w), values(host_w)) << "step " << step;
    EXPECT_EQ(device_scaler.get_scale(), host_scaler.get_scale()) << "step " << step;
    EXPECT_EQ(device_scaler.found_inf(), host_scaler.found_inf()) << "step " << step;
  }
  EXPECT_EQ(host_scaler.get_scale(), 256.0 / 2 * 2 * 2) << "halved once, grown twice: the test took both paths";
  // The skipped step did not count: the saved step counts agree.
  EXPECT_EQ(values(device_opt.state_dict()[1].second), values(host_opt.state_dict()[1].second));
}

TEST(GradScaler, CapturableNeedsACapturableOptimizer) {
  Tensor w = from_vector<float>({1.0f}).requires_grad_();
  SGD opt({w}, {.lr = 0.1});
  GradScaler scaler({.capturable = true});
  scaler.scale((w * w).sum()).backward();
  EXPECT_THROW_MSG(scaler.step(opt), "the optimizer must be capturable too");
}

}  // namespace
}  // namespace loom::optim
