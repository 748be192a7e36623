// Optimizers against their update rules written out in double, a few steps
// each; schedules against their closed forms.
#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>

#include <cmath>

#include "nn/nn.h"
#include "optim/lr_scheduler.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;

// Gradients for three steps of a 2-element parameter.
const std::vector<std::vector<double>> kGrads = {{0.5, -1.0}, {0.25, 2.0}, {-0.75, 0.1}};

Tensor param(std::vector<double> v) { return from_vector<double>(v).requires_grad_(); }

template <typename Opt>
std::vector<double> run(Opt& opt, Tensor w) {
  for (const auto& g : kGrads) {
    w.set_grad(from_vector<double>(g));
    opt.step();
  }
  return values(w);
}

TEST(SGD, PlainMomentumNesterovWeightDecay) {
  struct Case {
    optim::SGDOptions o;
  };
  for (optim::SGDOptions o : {optim::SGDOptions{.lr = 0.1},
                              optim::SGDOptions{.lr = 0.1, .momentum = 0.9},
                              optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.5},
                              optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .weight_decay = 0.1, .nesterov = true}}) {
    std::vector<double> w = {1.0, -2.0}, buf = {0, 0};
    for (size_t s = 0; s < kGrads.size(); ++s)
      for (int i = 0; i < 2; ++i) {
        double d = kGrads[s][i] + o.weight_decay * w[i];
        if (o.momentum != 0) {
          buf[i] = s == 0 ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
          d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
        }
        w[i] -= o.lr * d;
      }
    Tensor p = param({1.0, -2.0});
    optim::SGD opt({p}, o);
    expect_values(from_vector<double>(run(opt, p)), w, 1e-12);
  }
}

// Adam's rule in double over steps of gradients `grads` (one vector a
// step, one value a parameter).
void adam_reference(std::vector<double>& w, const std::vector<std::vector<double>>& grads,
                    const optim::AdamOptions& o, bool decoupled) {
  std::vector<double> m(w.size(), 0), v(w.size(), 0);
  for (size_t s = 0; s < grads.size(); ++s) {
    const double t = s + 1;
    for (size_t i = 0; i < w.size(); ++i) {
      double g = grads[s][i];
      if (decoupled)
        w[i] *= 1 - o.lr * o.weight_decay;
      else
        g += o.weight_decay * w[i];
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double m_hat = m[i] / (1 - std::pow(o.beta1, t)), v_hat = v[i] / (1 - std::pow(o.beta2, t));
      w[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
}

TEST(Adam, MatchesTheUpdateRule) {
  optim::AdamOptions o{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
  std::vector<double> expected = {1.0, -2.0};
  adam_reference(expected, kGrads, o, false);
  Tensor p = param({1.0, -2.0});
  optim::Adam opt({p}, o);
  expect_values(from_vector<double>(run(opt, p)), expected, 1e-12);
}

TEST(AdamW, DecaysTheWeightsApartFromTheGradient) {
  optim::AdamOptions o{.lr = 0.01, .weight_decay = 0.5};
  std::vector<double> expected = {1.0, -2.0}, coupled = {1.0, -2.0};
  adam_reference(expected, kGrads, o, true);
  adam_reference(coupled, kGrads, o, false);
  Tensor p = param({1.0, -2.0});
  optim::AdamW opt({p}, o);
  std::vector<double> got = run(opt, p);
  expect_values(from_vector<double>(got), expected, 1e-12);
  EXPECT_GT(std::abs(got[0] - coupled[0]), 1e-4);  // and differs from Adam's coupled decay
}

// The CPU's step in vector registers (8 float32 or 4 float64 lanes) and
// its scalar tail: 37 parameters against the rule in double, Adam and
// AdamW. And each parameter's bits do not depend on where its vector
// begins: the same values stepped as one tensor and as two (5 + 32, every
// lane shifted) agree to the bit, as a ZeRO shard must agree with the
// whole.
TEST(Adam, VectorAndTailMatchTheRuleAndEachOther) {
  const int64_t n = 37;
  Generator gen(5);
  const Tensor start = randn({n}, {.dtype = kFloat64}, &gen);
  std::vector<Tensor> grads;
  for (int s = 0; s < 3; ++s) grads.push_back(randn({n}, {.dtype = kFloat64}, &gen));
  for (DType dtype : {kFloat32, kFloat64})
    for (bool decoupled : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (decoupled ? " AdamW" : " Adam"));
      // A large rate, so that a last bit of the update shows in the weights.
      const optim::AdamOptions o{.lr = 0.5, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1};
      auto stepped = [&](std::vector<int64_t> cuts) {  // the parameters as pieces [cuts[i], cuts[i + 1])
        std::vector<Tensor> pieces;
        for (size_t i = 0; i + 1 < cuts.size(); ++i)
          pieces.push_back(start.narrow(0, cuts[i], cuts[i + 1] - cuts[i]).to(dtype).clone().requires_grad_());
        std::unique_ptr<optim::Optimizer> opt;
        if (decoupled)
          opt = std::make_unique<optim::AdamW>(pieces, o);
        else
          opt = std::make_unique<optim::Adam>(pieces, o);
        for (const Tensor& g : grads) {
          for (size_t i = 0; i < pieces.size(); ++i)
            pieces[i].set_grad(g.narrow(0, cuts[i], cuts[i + 1] - cuts[i]).to(dtype).contiguous());
          opt->step();
        }
        std::vector<double> out;
        for (const Tensor& piece : pieces)
          for (double x : values(piece)) out.push_back(x);
        return out;
      };
      const std::vector<double> whole = stepped({0, n}), split = stepped({0, 5, n});
      EXPECT_EQ(whole, split);
      // The rule in double, on the values the tensor started from.
      std::vector<double> expected = values(start.to(dtype));
      std::vector<std::vector<double>> steps;
      for (const Tensor& g : grads) steps.push_back(values(g.to(dtype)));
      adam_reference(expected, steps, o, decoupled);
      expect_values(from_vector<double>(whole), expected, dtype == kFloat32 ? 2e-6 : 1e-12);
    }
}

TEST(Optimizer, SkipsParametersWithoutGradients) {
  Tensor a = param({1, 1}), b = param({2, 2});
  optim::SGD opt({a, b}, {.lr = 1});
  a.set_grad(from_vector<double>({1, 1}));
  opt.step();
  expect_values(a, {0, 0});
  expect_values(b, {2, 2});
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

// zero_grad(set_to_none = false) zeroes gradients in their own memory (a DDP
// bucket view stays one); parameters without a gradient stay without.
TEST(Optimizer, ZeroGradInPlaceKeepsTheGradientsMemory) {
  Tensor a = param({1, 1}), b = param({2, 2});
  optim::SGD opt({a, b}, {.lr = 1});
  a.set_grad(from_vector<double>({3, 4}));
  const void* memory = a.grad().data_ptr<double>();
  opt.zero_grad(/*set_to_none=*/false);
  expect_values(a.grad(), {0, 0});
  EXPECT_EQ(a.grad().data_ptr<double>(), memory);
  EXPECT_FALSE(b.grad().defined());
}

TEST(Optimizer, StateDictResumesExactly) {
  Tensor w1 = param({1, -2}), w2 = param({1, -2});
  optim::Adam a({w1}, {.lr = 0.1}), b({w2}, {.lr = 0.1});
  for (int s = 0; s < 2; ++s) {
    w1.set_grad(from_vector<double>(kGrads[s]));
    a.step();
  }
  {
    NoGradGuard no_grad;
    w2.copy_(w1);
  }
  b.load_state_dict(a.state_dict());
  w1.set_grad(from_vector<double>(kGrads[2]));
  w2.set_grad(from_vector<double>(kGrads[2]));
  a.step();
  b.step();
  EXPECT_EQ(values(w1), values(w2));
  nn::NamedTensors bad = a.state_dict();
  bad.back().second = zeros({3});
  EXPECT_THROW_MSG(b.load_state_dict(bad), "has shape [3] and dtype float32 but parameter 0 has shape [2]");
}

// A resumed optimizer must be exactly the saved one: malformed, partial or
// foreign state is an error, never silently dropped or reinterpreted.
TEST(Optimizer, StateDictIsCheckedStrictly) {
  Tensor w1 = param({1, -2}), w2 = param({3, 4}), w3 = param({5});
  optim::Adam a({w1, w2, w3}, {.lr = 0.1});
  w1.set_grad(from_vector<double>({0.5, -1.0}));
  w2.set_grad(from_vector<double>({0.5, -1.0}));  // w3 has no gradient: it never steps
  a.step();
  const nn::NamedTensors saved = a.state_dict();
  optim::Adam b({param({0, 0}), param({0, 0}), param({0})}, {.lr = 0.1});
  b.load_state_dict(saved);  // the real thing loads
  EXPECT_EQ(values(b.state_dict().back().second), std::vector<double>{0}) << "w3's count: 0, saved all the same";

  auto with = [&](const std::string& key, Tensor t) {
    nn::NamedTensors s = saved;
    s.emplace_back(key, t);
    return s;
  };
  auto without = [&](const std::string& key) {
    nn::NamedTensors s;
    for (const auto& e : saved)
      if (e.first != key) s.push_back(e);
    return s;
  };
  EXPECT_THROW_MSG(b.load_state_dict(with("state.q.exp_avg", zeros({2}))), "has a non-numeric index");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.-1.exp_avg", zeros({2}))), "has a non-numeric index");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.7.exp_avg", zeros({2}))), "is for parameter 7, but there are only 3");
  EXPECT_THROW_MSG(b.load_state_dict(with("momentum", zeros({2}))), "unexpected entry 'momentum'");
  EXPECT_THROW_MSG(b.load_state_dict(without("state.1.exp_avg_sq")),
                   "parameter 1 has taken steps but 'state.1.exp_avg_sq' is missing");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.2.exp_avg", zeros({1}, {.dtype = kFloat64}))),
                   "parameter 2 has taken no step but has 'state.2.exp_avg'");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.0.momentum_buffer", zeros({2}, {.dtype = kFloat64}))),
                   "'state.0.momentum_buffer' is not state of this optimizer");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.0.exp_avg", zeros({2}, {.dtype = kFloat64}))), "appears twice");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.0.exp_avg_sq", zeros({2}, {.dtype = kInt64}))), "dtype int64");
  EXPECT_THROW_MSG(b.load_state_dict(without("lr")), "'lr' is missing");
  nn::NamedTensors negative = without("state.0.step");
  negative.emplace_back("state.0.step", full({}, -3, {.dtype = kInt64}));
  EXPECT_THROW_MSG(b.load_state_dict(negative), "'state.0.step' is -3; a step count is not negative");
  EXPECT_THROW_MSG(b.load_state_dict(with("state.2.step", full({}, 0, {.dtype = kInt64}))),
                   "'state.2.step' appears twice");
  // Every entry of a parameter removed, even of one that never stepped: the
  // state is incomplete, not a parameter that never stepped.
  for (int k : {1, 2}) {
    const std::string prefix = "state." + std::to_string(k) + ".";
    nn::NamedTensors lacking;
    for (const auto& e : saved)
      if (e.first.compare(0, prefix.size(), prefix) != 0) lacking.push_back(e);
    EXPECT_THROW_MSG(b.load_state_dict(lacking), "optimizer state: parameter " + std::to_string(k) + " has no '" +
                                                     prefix + "step' (saved for every parameter, 0 before its first "
                                                     "step): the state is incomplete");
  }
  // A failed load changes nothing: b still steps as the saved optimizer does.
  EXPECT_EQ(b.state_dict().size(), saved.size());
}

TEST(Optimizer, Errors) {
  EXPECT_THROW_MSG(optim::SGD({}, {}), "optimizer: got an empty parameter list");
  EXPECT_THROW_MSG(optim::Adam({param({1})}, {.beta1 = 1.0}), "Adam: betas must be in [0, 1)");
  EXPECT_THROW_MSG(optim::SGD({param({1})}, {.nesterov = true}), "Nesterov momentum needs momentum > 0");
  EXPECT_THROW_MSG(optim::SGD({arange(3)}, {}), "parameter 0 must be a floating-point leaf tensor");
  Tensor w = param({1, 2});
  EXPECT_THROW_MSG(optim::Adam({param({1}), w, w}, {}), "optimizer: parameter 2 is parameter 1 again");
}

// A module registered twice lists its parameters twice: each would step
// twice per gradient (on a GPU, concurrently within one launch).
TEST(Optimizer, AModuleRegisteredTwiceIsAnError) {
  nn::Linear shared(2, 2);
  nn::Sequential net(shared, nn::Tanh(), shared);
  EXPECT_THROW_MSG(optim::SGD(net->parameters(), {}), "optimizer: parameter 2 is parameter 0 again");
}

// The CPU step walked memory in order, so a transposed parameter took other
// elements' gradients, and so did any parameter with a transposed gradient;
// the CUDA kernel refused both. A strided parameter is an error on both now,
// a strided gradient is read through a contiguous copy.
TEST(Optimizer, StridedParametersAreErrorsStridedGradientsAreRead) {
  Tensor w = from_vector<double>({1, 2, 3, 4, 5, 6}).reshape({2, 3}).t().detach().requires_grad_();
  w.set_grad(ones({3, 2}, {.dtype = kFloat64}));
  optim::SGD sgd({w}, {.lr = 1});
  EXPECT_THROW_MSG(sgd.step(), "optimizer: parameter 0 (shape [3, 2]) is not contiguous");
  for (bool adam : {false, true}) {
    Tensor v = zeros({2, 3}, {.dtype = kFloat64}).requires_grad_();
    v.set_grad(from_vector<double>({1, 2, 3, 4, 5, 6}).reshape({3, 2}).t());  // [[1, 3, 5], [2, 4, 6]]
    if (adam) {
      optim::Adam opt({v}, {.lr = 1});
      opt.step();
      expect_values(v, {-1, -1, -1, -1, -1, -1}, 1e-6);  // Adam's first step: -lr * sign(g)
    } else {
      optim::SGD opt({v}, {.lr = 1});
      opt.step();
      expect_values(v, {-1, -3, -5, -2, -4, -6});
    }
  }
}

TEST(ClipGradNorm, ScalesToTheMaximumNorm) {
  Tensor a = param({3, 0}), b = param({0, 4});
  a.set_grad(from_vector<double>({3, 0}));
  b.set_grad(from_vector<double>({0, 4}));
  Tensor norm = optim::clip_grad_norm_({a, b}, 1.0);
  EXPECT_NEAR(norm.item(), 5.0, 1e-12);
  expect_values(a.grad(), {0.6, 0}, 1e-6);
  expect_values(b.grad(), {0, 0.8}, 1e-6);
  optim::clip_grad_norm_({a, b}, 10.0);  // below the maximum: unchanged
  expect_values(b.grad(), {0, 0.8}, 1e-6);
}

// The scale is converted once per dtype: each gradient still gets it in its own.
TEST(ClipGradNorm, GradientsOfSeveralDtypesAreEachScaled) {
  Tensor a = from_vector<float>({3, 0}).requires_grad_(), b = param({0, 4}), c = from_vector<float>({0, 0}).requires_grad_();
  a.set_grad(from_vector<float>({3, 0}));
  b.set_grad(from_vector<double>({0, 4}));
  c.set_grad(from_vector<float>({0, 0}));
  Tensor norm = optim::clip_grad_norm_({a, b, c}, 1.0);
  EXPECT_NEAR(norm.item(), 5.0, 1e-12);
  EXPECT_EQ(a.grad().dtype(), kFloat32);
  expect_values(a.grad(), {0.6, 0}, 1e-6);
  expect_values(b.grad(), {0, 0.8}, 1e-6);
  expect_values(c.grad(), {0, 0}, 0);
}

TEST(LRScheduler, ClosedForms) {
  Tensor w = param({1});
  optim::SGD opt({w}, {.lr = 1.0});
  optim::StepLR step(opt, 3, 0.5);
  EXPECT_DOUBLE_EQ(step.factor(2), 1.0);
  EXPECT_DOUBLE_EQ(step.factor(3), 0.5);
  EXPECT_DOUBLE_EQ(step.factor(7), 0.25);
  optim::CosineAnnealingLR cosine(opt, 10, 0.1);
  EXPECT_DOUBLE_EQ(cosine.factor(0), 1.0);
  EXPECT_NEAR(cosine.factor(5), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(cosine.factor(10), 0.1, 1e-12);
  EXPECT_NEAR(cosine.factor(20), 0.1, 1e-12);
  optim::LinearLR warm(opt, 0.1, 1.0, 4);
  EXPECT_NEAR(warm.factor(2), 0.55, 1e-12);
  EXPECT_NEAR(warm.factor(9), 1.0, 1e-12);
}

TEST(LRScheduler, WarmupThenCosineSetsTheOptimizersLr) {
  Tensor w = param({1});
  optim::SGD opt({w}, {.lr = 0.2});
  auto warm = std::make_shared<optim::LinearLR>(opt, 0.25, 1.0, 4);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 8);
  optim::SequentialLR schedule(opt, {warm, cosine}, {4});
  EXPECT_NEAR(opt.lr(), 0.05, 1e-12);  // warm-up starts at 0.25 * 0.2
  std::vector<double> lrs;
  for (int s = 0; s < 12; ++s) {
    schedule.step();
    lrs.push_back(opt.lr());
  }
  EXPECT_NEAR(lrs[0], 0.2 * (0.25 + 0.75 * 0.25), 1e-12);  // step 1 of the warm-up
  EXPECT_NEAR(lrs[3], 0.2, 1e-12);                          // milestone: cosine step 0
  EXPECT_NEAR(lrs[7], 0.2 * 0.5, 1e-12);                    // cosine step 4 of 8
  EXPECT_NEAR(lrs[11], 0.0, 1e-12);
  EXPECT_THROW_MSG(optim::SequentialLR(opt, {warm, cosine}, {}), "SequentialLR: 2 schedulers need 1 milestones");
}

// The warm-up changes the optimizer's lr before the cosine is made: both
// must still scale the lr the optimizer started with (PyTorch's
// initial_lr), so the cosine decays from the peak to eta_min. Taking the
// warmed-up lr as its base made eta_min / base 10 here, and the "decay"
// rose to ten times the peak.
TEST(LRScheduler, WarmupThenCosineDecaysFromThePeakToEtaMin) {
  Tensor w = param({1});
  optim::SGD opt({w}, {.lr = 0.2});
  auto warm = std::make_shared<optim::LinearLR>(opt, 0.01, 1.0, 4);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 8, /*eta_min=*/0.02);
  EXPECT_DOUBLE_EQ(cosine->base_lr(), 0.2);
  optim::SequentialLR schedule(opt, {warm, cosine}, {4});
  double highest = opt.lr();
  for (int s = 0; s < 12; ++s) {
    schedule.step();
    highest = std::max(highest, opt.lr());
    if (s == 3) {
      EXPECT_NEAR(opt.lr(), 0.2, 1e-12) << "the milestone: cosine's step 0 is the peak";
    }
  }
  EXPECT_NEAR(highest, 0.2, 1e-12);
  EXPECT_NEAR(opt.lr(), 0.02, 1e-12);
  schedule.set_step(8);  // resuming: the same lr as stepping there
  EXPECT_NEAR(opt.lr(), 0.02 + 0.18 * 0.5, 1e-12);
}

// A learning rate of 0 is legal: every schedule stays finite (no eta_min /
// base_lr), and training leaves the weights as they were.
TEST(LRScheduler, ALearningRateOfZeroTrainsNothingAndStaysFinite) {
  Tensor w = param({0.5, -1.0, 2.0});
  const std::vector<double> before = w.to_vector<double>();
  optim::AdamW opt({w}, {.lr = 0, .weight_decay = 0.1});
  auto warm = std::make_shared<optim::LinearLR>(opt, 0.01, 1.0, 2);
  auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, 4, /*eta_min=*/0.0);
  optim::SequentialLR schedule(opt, {warm, cosine}, {2});
  for (int s = 0; s < 6; ++s) {
    w.set_grad(ones({3}, {.dtype = kFloat64}));
    opt.step();
    schedule.step();
    EXPECT_EQ(opt.lr(), 0.0) << "step " << s;
    EXPECT_DOUBLE_EQ(cosine->factor(s), 1.0);
  }
  EXPECT_EQ(w.to_vector<double>(), before);
  // A schedule that makes a lr that is not finite is refused where it happens.
  optim::SGD sgd({w}, {.lr = 0.1});
  EXPECT_THROW_MSG(optim::LambdaLR(sgd, [](int64_t) { return std::numeric_limits<double>::infinity(); }),
                   "LRScheduler: the lr at step 0 is inf (base lr 0.1)");
}

}  // namespace
}  // namespace loom
