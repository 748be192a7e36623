// Fused scaled-dot-product attention (FlashAttention's algorithm, on the
// CPU) against the composite one (matmul, attention_softmax, matmul) and
// against finite differences.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "nn/nn.h"
#include "tensor/autocast.h"
#include "tensor/cpu/gemm_avx512.h"
#include "tensor/cpu/packed_gemm.h"
#include "tests/omp_threads.h"
#include "tests/test_util.h"

namespace loom {
namespace {

namespace F = nn::functional;
using F::AttentionKernel;
using testing::leaf64;
using testing::max_rel_error;

struct Result {
  Tensor out, dq, dk, dv;
};

// Output and input gradients of attention on copies of q, k, v, for a fixed
// random upstream gradient `dout`.
Result run(AttentionKernel kernel, const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
           const Tensor& dout) {
  F::AttentionKernelGuard choice(kernel);
  Tensor qc = q.detach().clone().requires_grad_(), kc = k.detach().clone().requires_grad_(),
         vc = v.detach().clone().requires_grad_();
  Tensor out = F::scaled_dot_product_attention(qc, kc, vc, causal);
  (out * dout).sum().backward();
  return {out.detach(), qc.grad(), kc.grad(), vc.grad()};
}

void expect_same(const Result& fused, const Result& composite, double tol) {
  EXPECT_LT(max_rel_error(fused.out, composite.out), tol);
  EXPECT_LT(max_rel_error(fused.dq, composite.dq), tol);
  EXPECT_LT(max_rel_error(fused.dk, composite.dk), tol);
  EXPECT_LT(max_rel_error(fused.dv, composite.dv), tol);
}

struct Case {
  Shape q, k, v;
  bool causal;
};

TEST(FusedAttention, MatchesTheCompositeForwardAndBackward) {
  // Query blocks are 64 rows: 70 spans two, the second partly.
  const std::vector<Case> cases = {
      {{2, 3, 70, 8}, {2, 3, 70, 8}, {2, 3, 70, 8}, true},
      {{2, 3, 70, 8}, {2, 3, 70, 8}, {2, 3, 70, 8}, false},
      {{1, 2, 33, 5}, {1, 2, 90, 5}, {1, 2, 90, 7}, false},  // Tq != Tk, D != Dv
      {{4, 130, 16}, {4, 130, 16}, {4, 130, 16}, true},       // 3-D: (heads, T, D)
      {{9, 4}, {9, 4}, {9, 2}, true},                         // 2-D
      {{1, 1, 1, 3}, {1, 1, 1, 3}, {1, 1, 1, 3}, true},       // one position
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.q) + (c.causal ? " causal" : ""));
    Tensor q = leaf64(c.q, seed++), k = leaf64(c.k, seed++), v = leaf64(c.v, seed++);
    std::vector<int64_t> out_shape = c.q.vec();
    out_shape.back() = c.v.vec().back();
    Tensor dout = leaf64(Shape(out_shape), seed++).detach();
    Result fused = run(AttentionKernel::kFused, q, k, v, c.causal, dout);
    Result composite = run(AttentionKernel::kComposite, q, k, v, c.causal, dout);
    EXPECT_EQ(fused.out.shape(), composite.out.shape());
    expect_same(fused, composite, 1e-12);
  }
}

// float32 on the CPU packs a slice's keys once and runs blocks of 16
// queries against their leading part (tensor/cpu/attention.cc): the same
// attention as the float64 composite, to float32's rounding. Shapes where
// the keys are packed: a causal square, the unmasked, 130 positions (a
// last block of 2 queries, a last panel of 2 keys), fewer queries than keys
// (the mask's offset inside a block), D != Dv.
TEST(FusedAttention, Float32OnPackedKeysMatchesFloat64) {
  const std::vector<Case> cases = {
      {{2, 3, 64, 32}, {2, 3, 64, 32}, {2, 3, 64, 32}, true},
      {{2, 3, 64, 32}, {2, 3, 64, 32}, {2, 3, 64, 32}, false},
      {{1, 2, 130, 16}, {1, 2, 130, 16}, {1, 2, 130, 16}, true},
      {{1, 2, 50, 32}, {1, 2, 130, 32}, {1, 2, 130, 16}, true},
      {{1, 2, 40, 64}, {1, 2, 96, 64}, {1, 2, 96, 48}, false},
  };
  uint64_t seed = 31;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::PrintToString(c.q) + " by " + ::testing::PrintToString(c.k) +
                 (c.causal ? " causal" : ""));
    const int64_t d = c.q.vec().back(), tk = c.k.vec()[2];
    EXPECT_TRUE(cpu::avx512_gemm_enabled() || cpu::packed_gemm_wins(16, tk, d, true)) << "keys not packed";
    Tensor q = leaf64(c.q, seed++), k = leaf64(c.k, seed++), v = leaf64(c.v, seed++);
    std::vector<int64_t> out_shape = c.q.vec();
    out_shape.back() = c.v.vec().back();
    Tensor dout = leaf64(Shape(out_shape), seed++).detach();
    auto f32 = [](const Tensor& t) { return t.detach().to(kFloat32); };
    Result fused = run(AttentionKernel::kFused, f32(q), f32(k), f32(v), c.causal, f32(dout));
    Result reference = run(AttentionKernel::kComposite, q, k, v, c.causal, dout);
    EXPECT_EQ(fused.out.dtype(), kFloat32);
    for (auto [got, want, name] : {std::tuple{fused.out, reference.out, "out"}, std::tuple{fused.dq, reference.dq, "dq"},
                                   std::tuple{fused.dk, reference.dk, "dk"}, std::tuple{fused.dv, reference.dv, "dv"}})
      EXPECT_LT(max_rel_error(got.to(kFloat64), want), 1e-5) << name;
  }
}

// The CPU kernel's scratch blocks are aligned, so its sums do not depend on
// where the heap puts them: the same float32 attention run in fresh threads
// (one OpenMP thread each, so the kernel's scratch is that thread's own),
// each having allocated a different amount first, agrees to the bit.
// Before, a malloc-placed scratch block made one benchmark's loss depend on
// the length of the path it was started from.
TEST(FusedAttention, ResultsDoNotDependOnTheHeapLayout) {
  Generator gen(11);
  const Shape shape({1, 2, 37, 24});
  const Tensor q = randn(shape, {}, &gen), k = randn(shape, {}, &gen), v = randn(shape, {}, &gen);
  const Tensor dout = randn(shape, {}, &gen);
  auto values_after = [&](size_t junk_bytes) {
    std::vector<float> values;
    testing::on_omp_threads(1, [&] {
      std::vector<char> junk(junk_bytes);  // moves this thread's later allocations
      const Result r = run(AttentionKernel::kFused, q, k, v, /*causal=*/true, dout);
      for (const Tensor& t : {r.out, r.dq, r.dk, r.dv})
        for (float x : t.contiguous().to_vector<float>()) values.push_back(x);
    });
    return values;
  };
  const std::vector<float> first = values_after(8);
  for (size_t junk : {24, 40, 56, 72, 88})
    EXPECT_TRUE(values_after(junk) == first) << "after " << junk << " bytes of other memory";
}

TEST(FusedAttention, GradientsMatchFiniteDifferences) {
  F::AttentionKernelGuard choice(AttentionKernel::kFused);
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    Tensor q = leaf64({1, 2, 67, 3}, 21), k = leaf64({1, 2, 67, 3}, 22), v = leaf64({1, 2, 67, 2}, 23);
    autograd::GradcheckResult r = autograd::gradcheck(
        [causal](const TensorList& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], causal); },
        {q, k, v});
    EXPECT_TRUE(r.ok) << r.message;
  }
}

// Causal attention over the heads of a (B, T, 3C) projection, as the
// attention layers split it: its parts (q, k, v as (B, T, C)) and the
// output with the heads back side by side, (B, T, H, D).
struct ProjectionAttended {
  TensorList parts;
  Tensor out;
};
ProjectionAttended attend_heads_of(const Tensor& projection, int64_t heads) {
  const int64_t b = projection.size(0), t = projection.size(1), c = projection.size(2) / 3;
  ProjectionAttended r{split(projection, c, 2), {}};
  auto by_head = [&](const Tensor& z) { return z.reshape({b, t, heads, c / heads}).transpose(1, 2); };
  r.out = F::scaled_dot_product_attention(by_head(r.parts[0]), by_head(r.parts[1]), by_head(r.parts[2]), true)
              .transpose(1, 2);
  return r;
}

// The attention layers' q, k and v are (B, H, T, D) views of one (B, T, 3C)
// projection. The fused op's output and gradients come back laid out as
// (B, T, H, D), so that putting the heads side by side again copies nothing.
TEST(FusedAttention, HeadsOfOneProjectionStaySideBySide) {
  const int64_t b = 2, t = 11, heads = 3, d = 4, c = heads * d;
  Tensor qkv = leaf64({b, t, 3 * c}, 31);
  Tensor dout = leaf64({b, t, c}, 32).detach();
  auto layer = [&](AttentionKernel kernel) {
    F::AttentionKernelGuard choice(kernel);
    Tensor x = qkv.detach().clone().requires_grad_();
    Tensor side_by_side = attend_heads_of(x, heads).out;
    (side_by_side.reshape({b, t, c}) * dout).sum().backward();
    return std::make_pair(side_by_side, x.grad());
  };
  auto [fused, fused_grad] = layer(AttentionKernel::kFused);
  auto [composite, composite_grad] = layer(AttentionKernel::kComposite);
  EXPECT_TRUE(fused.is_contiguous());
  EXPECT_LT(max_rel_error(fused, composite), 1e-12);
  EXPECT_LT(max_rel_error(fused_grad, composite_grad), 1e-12);
}

// ... and its gradients come back as the thirds of one buffer laid out as
// the projection, which split's backward passes on as the projection's
// gradient: the same memory, no copy.
TEST(FusedAttention, GradientOfOneProjectionArrivesWithoutACopy) {
  const int64_t b = 2, t = 5, heads = 2, d = 3, c = heads * d;
  F::AttentionKernelGuard fused(AttentionKernel::kFused);
  Tensor x = leaf64({b, t, 3 * c}, 33);
  Tensor projection = x * 1.0;  // not a leaf: autograd::grad hands back its gradient as it arrived
  const ProjectionAttended attended = attend_heads_of(projection, heads);
  Tensor loss = (attended.out.reshape({b, t, c}) * leaf64({b, t, c}, 34).detach()).sum();
  TensorList g = autograd::grad({loss}, {attended.parts[0], attended.parts[2], projection});
  EXPECT_EQ(g[0].storage(), g[2].storage()) << "dq's memory is the projection's gradient";
  EXPECT_EQ(g[1].storage(), g[2].storage());
  EXPECT_TRUE(g[2].is_contiguous());
  EXPECT_EQ(max_rel_error(g[2].narrow(2, 0, c), g[0]), 0.0);
  EXPECT_EQ(max_rel_error(g[2].narrow(2, 2 * c, c), g[1]), 0.0);
}

TEST(FusedAttention, SettingPicksTheKernel) {
  Tensor q = leaf64({1, 2, 5, 4}, 41), k = leaf64({1, 2, 5, 4}, 42), v = leaf64({1, 2, 5, 4}, 43);
  auto last_op = [&](AttentionKernel kernel) {
    F::AttentionKernelGuard choice(kernel);
    return std::string(F::scaled_dot_product_attention(q, k, v, true).grad_fn()->name());
  };
  EXPECT_EQ(last_op(AttentionKernel::kFused), "ScaledDotProductAttentionBackward");
  EXPECT_EQ(last_op(AttentionKernel::kAuto), "ScaledDotProductAttentionBackward");  // fused on the CPU
  EXPECT_NE(last_op(AttentionKernel::kComposite), "ScaledDotProductAttentionBackward");
  EXPECT_EQ(F::attention_kernel(), AttentionKernel::kAuto) << "each guard restores the setting it found";
  // Leading dims that broadcast (one k and v for both batch rows) take the composite path, fused or not.
  F::AttentionKernelGuard fused(AttentionKernel::kFused);
  Tensor q2 = leaf64({2, 2, 5, 4}, 44);
  Tensor broadcast = F::scaled_dot_product_attention(q2, k, v, true);
  EXPECT_NE(std::string(broadcast.grad_fn()->name()), "ScaledDotProductAttentionBackward");
  EXPECT_EQ(broadcast.shape(), Shape({2, 2, 5, 4}));
}

// The CPU's backward is deterministic either way: allowing otherwise
// (for CUDA's atomic dq) changes no bit here; the guard sets the setting
// and gives the previous one back.
TEST(FusedAttention, CpuIgnoresTheNondeterministicSetting) {
  ASSERT_FALSE(F::deterministic_attention()) << "nondeterministic by default, as in PyTorch";
  Tensor q = leaf64({2, 3, 70, 8}, 51), k = leaf64({2, 3, 70, 8}, 52), v = leaf64({2, 3, 70, 8}, 53);
  Tensor dout = leaf64({2, 3, 70, 8}, 54).detach();
  const Result relaxed = run(AttentionKernel::kFused, q, k, v, true, dout);
  const Result deterministic = [&] {
    F::DeterministicAttentionGuard strict(true);
    EXPECT_TRUE(F::deterministic_attention());
    return run(AttentionKernel::kFused, q, k, v, true, dout);
  }();
  EXPECT_FALSE(F::deterministic_attention()) << "the guard restores the setting it found";
  for (auto [a, b] : {std::pair{deterministic.dq, relaxed.dq}, std::pair{deterministic.dk, relaxed.dk},
                      std::pair{deterministic.dv, relaxed.dv}, std::pair{deterministic.out, relaxed.out}})
    EXPECT_EQ((a - b).abs().max().item(), 0.0);
}

// bfloat16 and float16 compute in float32 and round once: within a 16-bit
// rounding of the float32 result. Under autocast, float32 inputs run in the
// autocast dtype and their gradients come back in float32.
TEST(FusedAttention, SixteenBitAndAutocast) {
  F::AttentionKernelGuard choice(AttentionKernel::kFused);
  Generator g(51);
  Tensor q = randn({2, 2, 20, 8}, {}, &g), k = randn({2, 2, 20, 8}, {}, &g), v = randn({2, 2, 20, 8}, {}, &g);
  Tensor reference = F::scaled_dot_product_attention(q, k, v, true);
  for (DType dtype : {kBFloat16, kFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = dtype == kBFloat16 ? 3e-2 : 4e-3;
    Tensor low = F::scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), true);
    EXPECT_EQ(low.dtype(), dtype);
    EXPECT_LT(max_rel_error(low, reference), tol);

    Tensor ql = q.clone().requires_grad_(), kl = k.clone().requires_grad_(), vl = v.clone().requires_grad_();
    Tensor out;
    {
      AutocastGuard autocast(dtype);
      out = F::scaled_dot_product_attention(ql, kl, vl, true);
    }
    EXPECT_EQ(out.dtype(), dtype);
    EXPECT_LT(max_rel_error(out, reference), tol);
    out.to(kFloat32).sum().backward();
    EXPECT_EQ(ql.grad().dtype(), kFloat32);
    EXPECT_EQ(vl.grad().dtype(), kFloat32);
  }
}

// Causal with fewer queries than keys: the queries are the last of the keys'
// positions, so the output and every gradient are those of the last rows of
// square causal attention, whose other queries are left out of the loss.
// Both kernels, with query blocks (64 rows) crossing the offset.
TEST(FusedAttention, CausalWithFewerQueriesIsTheLastRowsOfSquareCausal) {
  manual_seed(12);
  for (const auto& [tq, tk] : std::vector<std::pair<int64_t, int64_t>>{{1, 9}, {5, 9}, {70, 150}, {9, 9}}) {
    const Tensor q_all = randn({2, 3, tk, 8}, {.dtype = kFloat64}), k = randn({2, 3, tk, 8}, {.dtype = kFloat64}),
                 v = randn({2, 3, tk, 6}, {.dtype = kFloat64}), dout = randn({2, 3, tq, 6}, {.dtype = kFloat64});
    const Tensor dout_all = cat({zeros({2, 3, tk - tq, 6}, {.dtype = kFloat64}), dout}, 2);
    const Result square = run(AttentionKernel::kComposite, q_all, k, v, true, dout_all);
    const Tensor q = q_all.narrow(2, tk - tq, tq).contiguous();
    for (AttentionKernel kernel : {AttentionKernel::kFused, AttentionKernel::kComposite}) {
      const Result last = run(kernel, q, k, v, true, dout);
      const std::string where = std::to_string(tq) + " of " + std::to_string(tk) + " queries, kernel " +
                                std::to_string(static_cast<int>(kernel));
      EXPECT_LT(max_rel_error(last.out, square.out.narrow(2, tk - tq, tq)), 1e-12) << where;
      EXPECT_LT(max_rel_error(last.dq, square.dq.narrow(2, tk - tq, tq)), 1e-12) << where;
      EXPECT_LT(max_rel_error(last.dk, square.dk), 1e-12) << where;
      EXPECT_LT(max_rel_error(last.dv, square.dv), 1e-12) << where;
    }
  }
}

TEST(FusedAttention, BadInputIsRefusedClearly) {
  F::AttentionKernelGuard choice(AttentionKernel::kFused);
  Tensor q = randn({2, 6, 4}), k = randn({2, 5, 4}), v = randn({2, 5, 4});
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, k, v, true), "causal attention needs no more queries than keys");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q, randn({2, 5, 3}), v, false), "do not fit together");
  EXPECT_THROW_MSG(F::scaled_dot_product_attention(q.to(kInt64), k.to(kInt64), v.to(kInt64), false),
                   "floating");
}

// Attention computed a block of keys at a time: two blocks' outputs merged
// by their logsumexps are the attention over both, and each block's
// backward, given the whole's out and logsumexp, gives its keys' and
// values' gradients and its share of dq. The reference is the composite
// over all the keys. The second block holds the queries' own positions
// (causal, square) after keys they see whole.
TEST(AttentionBlock, BlocksMergedByTheirLogsumexpsAreTheWholeAttention) {
  manual_seed(13);
  const int64_t t = 7;  // queries; keys: t before them, then t at their own positions
  const Tensor q = randn({2, 3, t, 8}, {.dtype = kFloat64}), k = randn({2, 3, 2 * t, 8}, {.dtype = kFloat64}),
               v = randn({2, 3, 2 * t, 6}, {.dtype = kFloat64}), dout = randn({2, 3, t, 6}, {.dtype = kFloat64});
  const Result whole = run(AttentionKernel::kComposite, q, k, v, /*causal=*/true, dout);
  const Tensor k0 = k.narrow(2, 0, t), k1 = k.narrow(2, t, t), v0 = v.narrow(2, 0, t), v1 = v.narrow(2, t, t);
  const F::AttentionBlock before = F::attention_block(q, k0, v0, /*causal=*/false);
  const F::AttentionBlock own = F::attention_block(q, k1, v1, /*causal=*/true);
  // Each block's output weighted by its share of the softmax's mass.
  const Tensor logsumexp = log(exp(before.logsumexp) + exp(own.logsumexp));
  const Tensor out = before.out * exp(before.logsumexp - logsumexp).unsqueeze(-1) +
                     own.out * exp(own.logsumexp - logsumexp).unsqueeze(-1);
  EXPECT_LT(max_rel_error(out, whole.out), 1e-12);
  const TensorList g0 = F::attention_block_backward(q, k0, v0, out, logsumexp, dout, false);
  const TensorList g1 = F::attention_block_backward(q, k1, v1, out, logsumexp, dout, true);
  EXPECT_LT(max_rel_error(g0[0] + g1[0], whole.dq), 1e-12);
  EXPECT_LT(max_rel_error(cat({g0[1], g1[1]}, 2), whole.dk), 1e-12);
  EXPECT_LT(max_rel_error(cat({g0[2], g1[2]}, 2), whole.dv), 1e-12);
}

TEST(AttentionBlock, BadInputIsRefusedClearly) {
  const Tensor q = randn({1, 2, 4, 3}), k = randn({1, 2, 4, 3});
  EXPECT_THROW_MSG(F::attention_block(q.reshape({2, 4, 3}), k, k, false), "expected q (B, H, Tq, D)");
  EXPECT_THROW_MSG(F::attention_block(q, k.to(kFloat64), k, false), "must share a dtype");
  EXPECT_THROW_MSG(F::attention_block(q, k.narrow(2, 0, 2), k.narrow(2, 0, 2), true),
                   "causal attention needs no more queries than keys");
  const F::AttentionBlock block = F::attention_block(q, k, k, false);
  EXPECT_THROW_MSG(F::attention_block_backward(q, k, k, block.out, block.logsumexp.narrow(2, 0, 3), block.out, false),
                   "expected out and dout [1, 2, 4, 3] and logsumexp (B, H, Tq)");
}

}  // namespace
}  // namespace loom
