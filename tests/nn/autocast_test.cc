// Autocast: which op runs in which dtype (a table), that the autocast ops
// equal the same ops on explicitly cast inputs, and that gradients reach
// float32 parameters as float32.
#include "tensor/autocast.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "autograd/checkpoint.h"
#include "nn/nn.h"
#include "tests/test_util.h"

namespace loom {
namespace {

namespace F = nn::functional;
using testing::values;

using Cast = std::function<Tensor(const Tensor&)>;

struct PolicyCase {
  std::string op;
  DType input;     // the dtype every floating input comes in
  DType expected;  // the output's dtype under autocast(bfloat16)
  std::function<Tensor(const Cast&)> run;  // the op, its floating inputs passed through `cast`
};

std::vector<PolicyCase> policy_cases() {
  Generator gen(31);
  Tensor x = randn({4, 6}, {}, &gen), w = randn({5, 6}, {}, &gen), b = randn({5}, {}, &gen);
  Tensor img = randn({2, 3, 6, 6}, {}, &gen), kernel = randn({4, 3, 3, 3}, {}, &gen);
  Tensor bn_w = ones({3}), bn_b = zeros({3}), labels = from_vector<int64_t>({0, 2, 1, 4}, {4});
  return {
      // In 16 bits, from float32 inputs.
      {"matmul", kFloat32, kBFloat16, [=](const Cast& c) { return matmul(c(x), c(w).t()); }},
      {"linear", kFloat32, kBFloat16, [=](const Cast& c) { return F::linear(c(x), c(w), c(b)); }},
      {"addmm", kFloat32, kBFloat16, [=](const Cast& c) { return addmm(c(b), c(x), c(w).t()); }},
      {"conv2d", kFloat32, kBFloat16, [=](const Cast& c) { return F::conv2d(c(img), c(kernel)); }},
      // In float32, from bfloat16 inputs.
      {"softmax", kBFloat16, kFloat32, [=](const Cast& c) { return softmax(c(x), 1); }},
      {"log_softmax", kBFloat16, kFloat32, [=](const Cast& c) { return log_softmax(c(x), 1); }},
      {"cross_entropy", kBFloat16, kFloat32, [=](const Cast& c) { return F::cross_entropy(c(x.narrow(1, 0, 5)), labels); }},
      {"layer_norm", kBFloat16, kFloat32, [=](const Cast& c) { return F::layer_norm(c(x), {6}, c(w.narrow(0, 0, 1).reshape({6})), Tensor()); }},
      {"batch_norm", kBFloat16, kFloat32,
       [=](const Cast& c) { return F::batch_norm(c(img), Tensor(), Tensor(), c(bn_w), c(bn_b), true, 0.1, 1e-5); }},
      {"sum", kBFloat16, kFloat32, [=](const Cast& c) { return sum(c(x), {0}); }},
      {"mean", kBFloat16, kFloat32, [=](const Cast& c) { return mean(c(x), {1}); }},
      // Attention in 16 bits: fused (float32 inside), or composite with its
      // scores' softmax in the 16-bit dtype (float32 inside, rounded once).
      {"scaled_dot_product_attention", kFloat32, kBFloat16,
       [=](const Cast& c) { return F::scaled_dot_product_attention(c(img), c(img), c(img), true); }},
      {"attention_softmax", kBFloat16, kBFloat16, [=](const Cast& c) { return attention_softmax(c(x), 0.5, false); }},
      // On neither list: the inputs' dtype.
      {"relu", kBFloat16, kBFloat16, [=](const Cast& c) { return relu(c(x)); }},
      {"tanh", kFloat32, kFloat32, [=](const Cast& c) { return tanh(c(x)); }},
      {"add", kBFloat16, kBFloat16, [=](const Cast& c) { return c(x) + c(b.narrow(0, 0, 1)); }},
  };
}

TEST(Autocast, EachOpRunsInItsDtype) {
  for (const PolicyCase& c : policy_cases()) {
    SCOPED_TRACE(c.op);
    const Cast to_input = [&](const Tensor& t) { return t.to(c.input); };
    EXPECT_EQ(c.run(to_input).dtype(), c.input) << "outside autocast the dtype is the inputs'";
    Tensor y;
    {
      AutocastGuard autocast(kBFloat16);
      y = c.run(to_input);
    }
    EXPECT_EQ(y.dtype(), c.expected);
    // Its value: the op outside autocast on inputs cast to its dtype by hand.
    Tensor by_hand = c.run([&](const Tensor& t) { return t.to(c.input).to(c.expected); });
    EXPECT_EQ(values(y), values(by_hand));
  }
}

// A float32 Linear under autocast: its product runs in bfloat16, the loss in
// float32, and the weight's gradient arrives in float32, equal to the graph
// written with explicit casts.
TEST(Autocast, GradientsReachFloat32ParametersAsFloat32) {
  Generator gen(32);
  manual_seed(3);
  nn::Linear fc(6, 5);
  Tensor x = randn({8, 6}, {}, &gen), labels = from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2}, {8});
  Tensor loss;
  {
    AutocastGuard autocast(kBFloat16);
    Tensor logits = fc->forward(x);
    EXPECT_EQ(logits.dtype(), kBFloat16);
    loss = F::cross_entropy(logits, labels);
    EXPECT_EQ(loss.dtype(), kFloat32);
  }
  loss.backward();
  EXPECT_EQ(fc->weight.grad().dtype(), kFloat32);
  EXPECT_EQ(fc->bias.grad().dtype(), kFloat32);

  Tensor w = fc->weight.detach().clone().requires_grad_(), b = fc->bias.detach().clone().requires_grad_();
  Tensor by_hand = F::cross_entropy(
      F::linear(x.to(kBFloat16), w.to(kBFloat16), b.to(kBFloat16)).to(kFloat32), labels);
  by_hand.backward();
  EXPECT_EQ(loss.item(), by_hand.item());
  EXPECT_EQ(values(fc->weight.grad()), values(w.grad()));
  EXPECT_EQ(values(fc->bias.grad()), values(b.grad()));
}

TEST(Autocast, ScopesNestAndRestore) {
  EXPECT_FALSE(autocast_dtype().has_value());
  {
    AutocastGuard outer(kBFloat16);
    EXPECT_EQ(autocast_dtype(), kBFloat16);
    {
      AutocastGuard inner(kFloat16);
      EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), kFloat16);
      AutocastGuard off(std::nullopt);
      EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), kFloat32);
    }
    EXPECT_EQ(autocast_dtype(), kBFloat16);
  }
  EXPECT_FALSE(autocast_dtype().has_value());
  EXPECT_EQ(autocast_dtype_for("fp32"), std::nullopt);
  EXPECT_EQ(autocast_dtype_for("bf16"), kBFloat16);
  EXPECT_EQ(autocast_dtype_for("fp16"), kFloat16);
  EXPECT_EQ(autocast_dtype_for("fp8"), kBFloat16);  // float8 Linear layers, the rest in bf16
  EXPECT_THROW_MSG(autocast_dtype_for("fp4"), "precision 'fp4': expected fp32, bf16, fp16 or fp8");
  EXPECT_THROW_MSG(AutocastGuard{kFloat64}, "autocast: expected kBFloat16 or kFloat16, got float64");
}

// A checkpointed segment replays under the autocast it ran under: the same
// gradients as without checkpointing.
TEST(Autocast, CheckpointReplaysInTheForwardsDtypes) {
  manual_seed(4);
  nn::Sequential net(nn::Linear(6, 8), nn::Tanh(), nn::Linear(8, 3));
  nn::Sequential copy(net->clone());
  Tensor x = randn({5, 6}), labels = from_vector<int64_t>({0, 1, 2, 0, 1}, {5});
  Tensor plain, checkpointed;
  {
    AutocastGuard autocast(kBFloat16);
    plain = F::cross_entropy(net->forward(x), labels);
    checkpointed =
        F::cross_entropy(autograd::checkpoint([&](const Tensor& in) { return copy->forward(in); }, x), labels);
  }
  plain.backward();
  checkpointed.backward();
  const TensorList a = net->parameters(), b = copy->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(values(a[i].grad()), values(b[i].grad())) << i;
}

}  // namespace
}  // namespace loom
