// Fused attention on the GPU (tensor/cuda/attention.cu) against the CPU's
// fused attention in float64 (itself checked against the composite and
// finite differences: tests/nn/attention_test): the output and the three
// input gradients, for float64, float32 and the 16-bit floats, causal or
// not, sizes that leave partial tiles, and the attention layers' strided
// q, k, v. Each case checks the fused kernels ran (not the composite
// fallback), so none can pass without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>

#include "autograd/node.h"
#include "nn/nn.h"
#include "tensor/autocast.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::testing {
namespace {

namespace F = nn::functional;

struct Case {
  int64_t batch, heads, tq, tk, d, dv;
  bool causal;
  bool heads_inside_rows;  // q, k, v as (B, T, H, D) memory viewed as (B, H, T, D)
};

std::string describe(const Case& c) {
  return "B" + std::to_string(c.batch) + " H" + std::to_string(c.heads) + " Tq" + std::to_string(c.tq) + " Tk" +
         std::to_string(c.tk) + " D" + std::to_string(c.d) + " Dv" + std::to_string(c.dv) +
         (c.causal ? " causal" : "") + (c.heads_inside_rows ? " strided" : "");
}

Tensor make(const Case& c, int64_t t, int64_t d, uint64_t seed, const Device& device, DType dtype) {
  Tensor x = random({c.batch, t, c.heads, d}, kFloat64, seed).to(dtype).to(device);
  return c.heads_inside_rows ? x.transpose(1, 2) : x.transpose(1, 2).contiguous();
}

struct Attended {
  Tensor out, dq, dk, dv;
  std::string node;
};

Attended attend(const Case& c, const Device& device, DType dtype) {
  Tensor q = make(c, c.tq, c.d, 1, device, dtype).requires_grad_();
  Tensor k = make(c, c.tk, c.d, 2, device, dtype).requires_grad_();
  Tensor v = make(c, c.tk, c.dv, 3, device, dtype).requires_grad_();
  Tensor dout = random({c.batch, c.heads, c.tq, c.dv}, kFloat64, 4).to(dtype).to(device);
  Tensor out = F::scaled_dot_product_attention(q, k, v, c.causal);
  const std::string node = out.grad_fn()->name();
  (out * dout).sum().backward();
  auto leaf_grad = [](const Tensor& t) { return t.grad(); };
  return {out.detach(), leaf_grad(q), leaf_grad(k), leaf_grad(v), node};
}

const std::vector<Case> kCases = {
    {2, 3, 70, 70, 40, 24, true, false},      // partial tiles, D and Dv not multiples of 16
    {2, 3, 70, 70, 40, 24, false, false},
    {1, 2, 33, 90, 64, 64, false, false},     // Tq != Tk
    {1, 2, 70, 150, 40, 24, true, false},     // causal, the queries the last 70 of 150 positions
    {2, 6, 256, 256, 64, 64, true, true},     // the gpt workload's layout, one tile row of four
    {1, 2, 130, 130, 128, 128, true, true},   // the largest head dim the kernels take
    {1, 1, 1, 1, 8, 8, true, false},          // one position
};

// A GPU result of `dtype` against a float64 CPU reference: element by element
// (relative to max(1, |reference|)) for float32 and float64; for the 16-bit
// types relative to the tensor's largest element, since rounding the
// weights errs in proportion to a row's values, not to each element.
void expect_near(const Tensor& from_gpu, const Tensor& reference, DType dtype, double tol, const std::string& what) {
  ASSERT_TRUE(from_gpu.device().is_cuda()) << what;
  EXPECT_EQ(from_gpu.dtype(), dtype) << what;
  ASSERT_EQ(from_gpu.shape(), reference.shape()) << what;
  if (!is_16bit_floating(dtype)) {
    EXPECT_LE(max_rel_error(from_gpu, reference.to(dtype)), tol) << what;
    return;
  }
  const double largest = std::max(1.0, reference.abs().max().item());
  const double error = (from_gpu.to(Device::cpu()).to(kFloat64) - reference).abs().max().item();
  EXPECT_LE(error / largest, tol) << what << ": largest |reference| " << largest;
}

class CudaFusedAttention : public ::testing::TestWithParam<DType> {};

// The deterministic backward (a dk/dv kernel and a dq kernel); the default's
// atomic dq: AtomicDqMatchesTheCpu.
TEST_P(CudaFusedAttention, MatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  F::AttentionKernelGuard fused(F::AttentionKernel::kFused);
  F::DeterministicAttentionGuard strict(true);
  // float32 sums in other orders than Eigen. The 16-bit kernels round the
  // attention weights and dS to 16 bits for the tensor cores (as
  // FlashAttention-2), on top of the outputs' own rounding.
  const double tol = dtype == kFloat64 ? 1e-10 : dtype == kFloat32 ? 2e-4 : dtype == kBFloat16 ? 2e-2 : 4e-3;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    Attended on_gpu = attend(c, gpu_device(), dtype);
    EXPECT_EQ(on_gpu.node, "ScaledDotProductAttentionBackward");
    // Reference: the same (rounded) inputs in float64 on the CPU, rounded as the GPU's result is.
    Attended on_cpu = attend(c, Device::cpu(), kFloat64);
    expect_near(on_gpu.out, on_cpu.out, dtype, tol, "out");
    expect_near(on_gpu.dq, on_cpu.dq, dtype, tol, "dq");
    expect_near(on_gpu.dk, on_cpu.dk, dtype, tol, "dk");
    expect_near(on_gpu.dv, on_cpu.dv, dtype, tol, "dv");
  }
}

// The backward that adds dq's shares with atomics (float32 and float64)
// against the same CPU reference. That it ran, and not the dq kernel, shows
// in float32's bits: the key tiles' shares of dq are rounded and summed in
// another order, so dq differs in its last bits from the deterministic
// path's (which the two-tile and four-tile cases have). The 16-bit
// tensor-core kernels have one backward, so there the setting changes no bit.
TEST_P(CudaFusedAttention, AtomicDqMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  F::AttentionKernelGuard fused(F::AttentionKernel::kFused);
  const double tol = dtype == kFloat64 ? 1e-10 : dtype == kFloat32 ? 2e-4 : dtype == kBFloat16 ? 2e-2 : 4e-3;
  bool some_dq_differs = false;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const Attended deterministic = [&] {
      F::DeterministicAttentionGuard strict(true);
      return attend(c, gpu_device(), dtype);
    }();
    Attended on_gpu = [&] {
      F::DeterministicAttentionGuard atomics(false);
      return attend(c, gpu_device(), dtype);
    }();
    Attended on_cpu = attend(c, Device::cpu(), kFloat64);
    expect_near(on_gpu.out, on_cpu.out, dtype, tol, "out");
    expect_near(on_gpu.dq, on_cpu.dq, dtype, tol, "dq");
    expect_near(on_gpu.dk, on_cpu.dk, dtype, tol, "dk");
    expect_near(on_gpu.dv, on_cpu.dv, dtype, tol, "dv");
    some_dq_differs = some_dq_differs || (on_gpu.dq - deterministic.dq).abs().max().item() > 0;
  }
  if (dtype == kFloat32) {
    EXPECT_TRUE(some_dq_differs) << "dq the same bits both ways: did the atomic path run?";
  }
  if (is_16bit_floating(dtype)) {
    EXPECT_FALSE(some_dq_differs) << "the tensor-core kernels ignore the setting";
  }
}

// Asked to be deterministic, the backward gives the same bits on every run.
TEST_P(CudaFusedAttention, DeterministicBackwardRepeatsItsBits) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  F::DeterministicAttentionGuard strict(true);
  F::AttentionKernelGuard fused(F::AttentionKernel::kFused);
  const Case c{2, 6, 256, 256, 64, 64, true, true};
  const Attended first = attend(c, gpu_device(), dtype), second = attend(c, gpu_device(), dtype);
  for (auto [a, b, what] : {std::tuple{first.dq, second.dq, "dq"}, std::tuple{first.dk, second.dk, "dk"},
                            std::tuple{first.dv, second.dv, "dv"}})
    EXPECT_EQ((a.to(kFloat64) - b.to(kFloat64)).abs().max().item(), 0.0) << what;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFusedAttention, ::testing::Values(kFloat64, kFloat32, kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The fused op's output keeps q's (B, T, H, D) layout, so the heads go side
// by side again without a copy, as on the CPU.
TEST(CudaFusedAttentionLayout, OutputKeepsTheHeadsSideBySide) {
  LOOM_REQUIRE_CUDA();
  F::AttentionKernelGuard fused(F::AttentionKernel::kFused);
  const Case c{2, 6, 256, 256, 64, 64, true, true};
  Attended r = attend(c, gpu_device(), kFloat32);
  EXPECT_TRUE(r.out.transpose(1, 2).is_contiguous());
}

// q, k and v split from one (B, T, 3C) projection, as the attention layers
// do, get their gradients as the thirds of one buffer, which becomes the
// projection's gradient (nn/functional/attention.cc): against the CPU, with
// either backward, in float32 and on the tensor cores.
TEST(CudaFusedAttentionLayout, GradientOfOneProjectionMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  F::AttentionKernelGuard fused(F::AttentionKernel::kFused);
  const int64_t b = 2, t = 70, heads = 3, d = 40, c = heads * d;
  const Tensor qkv = random({b, t, 3 * c}, kFloat64, 11), dout = random({b, t, c}, kFloat64, 12);
  auto gradient = [&](const Device& device, DType dtype) {
    Tensor x = qkv.to(dtype).to(device).detach().requires_grad_();  // a leaf of its own, not qkv
    TensorList parts = split(x, c, 2);
    auto by_head = [&](const Tensor& z) { return z.reshape({b, t, heads, d}).transpose(1, 2); };
    Tensor y = F::scaled_dot_product_attention(by_head(parts[0]), by_head(parts[1]), by_head(parts[2]), true);
    (y.transpose(1, 2).reshape({b, t, c}) * dout.to(dtype).to(device)).sum().backward();
    return x.grad();
  };
  const Tensor reference = gradient(Device::cpu(), kFloat64);
  for (bool deterministic : {true, false}) {
    SCOPED_TRACE(deterministic ? "deterministic" : "atomic dq");
    F::DeterministicAttentionGuard setting(deterministic);
    expect_near(gradient(gpu_device(), kFloat32), reference, kFloat32, 2e-4, "float32");
    expect_near(gradient(gpu_device(), kBFloat16), reference, kBFloat16, 2e-2, "bfloat16");
  }
}

// Head dims over 128 do not fit the CUDA kernels: the composite runs, with
// the same result as the CPU's fused kernel.
TEST(CudaFusedAttentionLayout, WideHeadsRunTheComposite) {
  LOOM_REQUIRE_CUDA();
  F::AttentionKernelGuard fused(F::AttentionKernel::kFused);
  const Case c{1, 2, 20, 20, 160, 160, true, false};
  Attended on_gpu = attend(c, gpu_device(), kFloat64);
  EXPECT_NE(on_gpu.node, "ScaledDotProductAttentionBackward");
  Attended on_cpu = attend(c, Device::cpu(), kFloat64);
  expect_close(on_gpu.out, on_cpu.out, 1e-10, "out");
  expect_close(on_gpu.dq, on_cpu.dq, 1e-10, "dq");
}

// A GPT block trained a few steps with the fused kernels follows the
// composite's losses: the kernels hold up inside a real model, under
// autocast too.
TEST(CudaFusedAttentionLayout, TrainsLikeTheComposite) {
  LOOM_REQUIRE_CUDA();
  auto losses = [](F::AttentionKernel kernel, std::optional<DType> autocast) {
    F::AttentionKernelGuard choice(kernel);
    manual_seed(7);
    nn::CausalSelfAttention attn({.embed_dim = 64, .num_heads = 4});
    attn->to(gpu_device());
    Tensor x = random({4, 48, 64}, kFloat32, 9).to(gpu_device());
    std::vector<double> out;
    for (int step = 0; step < 5; ++step) {
      Tensor loss;
      {
        AutocastGuard guard(autocast);
        loss = attn->forward(x).to(kFloat32).square().mean();
      }
      for (const Tensor& p : attn->parameters()) p.set_grad(Tensor());
      loss.backward();
      NoGradGuard no_grad;
      for (const Tensor& p : attn->parameters()) p.sub_(p.grad(), 0.1);
      out.push_back(loss.item());
    }
    return out;
  };
  for (std::optional<DType> autocast : {std::optional<DType>(), std::optional<DType>(kBFloat16)}) {
    SCOPED_TRACE(autocast ? "bf16 autocast" : "float32");
    std::vector<double> fused = losses(F::AttentionKernel::kFused, autocast);
    std::vector<double> composite = losses(F::AttentionKernel::kComposite, autocast);
    for (size_t i = 0; i < fused.size(); ++i)
      EXPECT_NEAR(fused[i], composite[i], (autocast ? 2e-2 : 1e-4) * std::abs(composite[i])) << "step " << i;
  }
}

}  // namespace
}  // namespace loom::testing
