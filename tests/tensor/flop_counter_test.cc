// FlopCounter against FLOPs counted by hand for small models, forward and
// forward + backward. Each test's comment gives what PyTorch's
// FlopCounterMode reports for the same model (torch/utils/flop_counter.py's
// formulas, worked out by hand), so the numbers compare across frameworks.
#include "tensor/flop_counter.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <thread>

#include "nn/nn.h"

namespace loom {
namespace {

using Counts = std::map<std::string, int64_t>;

TEST(FlopCounter, CountsALinearLayerForwardAndBackward) {
  manual_seed(0);
  nn::Linear linear({.in_features = 4, .out_features = 3});
  Tensor x = randn({2, 4});
  FlopCounter counter;
  FlopCounter::Scope scope(counter);
  Tensor y = linear->forward(x);
  // addmm (2, 4) @ (4, 3): 2 * 2 * 4 * 3 = 48; the bias is free.
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 48}}));
  y.sum().backward();
  // dW = dy^T x, one mm of 48; x needs no gradient, so no dx.
  // PyTorch: {addmm: 48, mm: 48}, total 96.
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 48}, {"mm", 48}}));
  EXPECT_EQ(counter.total(), 96);
}

TEST(FlopCounter, CountsAnMlpsInputGradientOnlyWhereItIsNeeded) {
  manual_seed(0);
  nn::Sequential mlp(nn::Linear({.in_features = 784, .out_features = 128}), nn::ReLU(),
                     nn::Linear({.in_features = 128, .out_features = 10}));
  Tensor x = randn({32, 784});
  FlopCounter counter;
  FlopCounter::Scope scope(counter);
  Tensor loss = nn::functional::cross_entropy(mlp->forward(x), randint(0, 10, {32}));
  // 2 * 32 * 784 * 128 + 2 * 32 * 128 * 10 = 6,422,528 + 81,920.
  EXPECT_EQ(counter.total(), 6'504'448);
  loss.backward();
  // Backward: the first layer's dW (6,422,528), the second's dW and dx (2 x 81,920).
  // PyTorch: {addmm: 6,504,448, mm: 6,586,368}, total 13,090,816.
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 6'504'448}, {"mm", 6'586'368}}));
  EXPECT_EQ(counter.total(), 13'090'816);
}

TEST(FlopCounter, CountsASmallConvNet) {
  manual_seed(0);
  nn::Sequential net(nn::Conv2d({.in_channels = 1, .out_channels = 4, .kernel_size = 3, .padding = 1}), nn::ReLU(),
                     nn::MaxPool2d({.kernel_size = 2}),
                     nn::Conv2d({.in_channels = 4, .out_channels = 8, .kernel_size = 3, .stride = 2, .padding = 1}),
                     nn::Flatten(), nn::Linear({.in_features = 32, .out_features = 10}));
  Tensor x = randn({2, 1, 8, 8});
  FlopCounter counter;
  FlopCounter::Scope scope(counter);
  Tensor y = net->forward(x);
  // conv1: 2 N C_out H_out W_out C_in kH kW = 2 * 2 * 4 * 8 * 8 * 1 * 9 = 9216
  // conv2 (on 4 x 4, stride 2, padding 1: 2 x 2 out): 2 * 2 * 8 * 2 * 2 * 4 * 9 = 4608
  // linear: 2 * 2 * 32 * 10 = 1280
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 1280}, {"convolution", 13'824}}));
  y.sum().backward();
  // conv1: dW only (the images need no gradient) 9216; conv2: dx and dW,
  // 4608 each; linear: dx and dW, 1280 each.
  // PyTorch: {convolution: 13,824, convolution_backward: 18,432, addmm: 1280, mm: 2560}, total 36,096.
  EXPECT_EQ(counter.by_op(),
            (Counts{{"addmm", 1280}, {"convolution", 13'824}, {"convolution_backward", 18'432}, {"mm", 2560}}));
  EXPECT_EQ(counter.total(), 36'096);
}

// B 2, T 4, C 8, 2 heads of D 4.
// qkv: 2 * 8 * 8 * 24 = 3072; proj: 2 * 8 * 8 * 8 = 1024, backward dW only
// for qkv (x needs no gradient), dx and dW for proj.
TEST(FlopCounter, CountsTheFusedAttentionAsPyTorchsSdpa) {
  manual_seed(0);
  nn::functional::AttentionKernelGuard fused(nn::functional::AttentionKernel::kFused);
  nn::CausalSelfAttention attn({.embed_dim = 8, .num_heads = 2});
  Tensor x = randn({2, 4, 8});
  FlopCounter counter;
  FlopCounter::Scope scope(counter);
  Tensor y = attn->forward(x);
  // sdpa: 2 B H Tq Tk (D + Dv) = 2 * 2 * 2 * 4 * 4 * 8 = 1024, causal or not.
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 4096}, {"scaled_dot_product_attention", 1024}}));
  y.sum().backward();
  // sdpa backward: 2 B H Tq Tk (3 D + 2 Dv) = 2 * 2 * 2 * 4 * 4 * 20 = 2560
  // (the scores recomputed, then dP, dv, dq, dk).
  // PyTorch on a GPU (flash or efficient kernel): {addmm: 4096, mm: 5120,
  // _scaled_dot_product_flash_attention: 1024, ..._backward: 2560}, total 12,800.
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 4096},
                                     {"mm", 5120},
                                     {"scaled_dot_product_attention", 1024},
                                     {"scaled_dot_product_attention_backward", 2560}}));
  EXPECT_EQ(counter.total(), 12'800);
}

TEST(FlopCounter, CountsTheCompositeAttentionAsItsProducts) {
  manual_seed(0);
  nn::functional::AttentionKernelGuard composite(nn::functional::AttentionKernel::kComposite);
  nn::CausalSelfAttention attn({.embed_dim = 8, .num_heads = 2});
  Tensor x = randn({2, 4, 8});
  FlopCounter counter;
  FlopCounter::Scope scope(counter);
  Tensor y = attn->forward(x);
  // q k^T and att v: two bmm of 2 * (B H) * 4 * 4 * 4 = 512 each, the fused kernel's 1024.
  EXPECT_EQ(counter.get("bmm"), 1024);
  y.sum().backward();
  // Each bmm's backward is two bmm, nothing recomputed: 4 x 512.
  // PyTorch's math sdpa (bmm, softmax, bmm) counts the same: bmm 3072.
  EXPECT_EQ(counter.get("bmm"), 3072);
  EXPECT_EQ(counter.total(), 4096 + 5120 + 3072);
}

TEST(FlopCounter, CountsMatmulsByTheProductTheyBecome) {
  Tensor a = randn({3, 5}, {.requires_grad = true}), b = randn({5, 2}, {.requires_grad = true});
  Tensor batch = randn({4, 3, 5}, {.requires_grad = true});
  FlopCounter counter;
  {
    FlopCounter::Scope scope(counter);
    Tensor y = a.matmul(b) + batch.matmul(b).sum({0});  // the batch folds into one (12, 5) @ (5, 2) mm
    EXPECT_EQ(counter.by_op(), (Counts{{"mm", 2 * 3 * 5 * 2 + 2 * 12 * 5 * 2}}));
    y.sum().backward();
  }
  EXPECT_EQ(counter.get("mm"), 3 * (60 + 240));  // forward, da, db
  EXPECT_EQ(counter.get("bmm"), 0);
  counter.reset();
  EXPECT_EQ(counter.total(), 0);
  {
    FlopCounter::Scope scope(counter);
    bmm(batch, randn({4, 5, 2})).sum().backward();
  }
  EXPECT_EQ(counter.by_op(), (Counts{{"bmm", 2 * (2 * 4 * 3 * 5 * 2)}}));  // forward and d(batch)
}

TEST(FlopCounter, CountsOnlyWhileAScopeIsActive) {
  Tensor a = randn({8, 8});
  FlopCounter counter;
  mm(a, a);
  {
    FlopCounter::Scope scope(counter);
    mm(a, a);
  }
  mm(a, a);
  EXPECT_EQ(counter.total(), 2 * 8 * 8 * 8);
  EXPECT_FALSE(flops_counted());
}

TEST(FlopCounter, NestedScopesCountInEveryCounterOnce) {
  Tensor a = randn({4, 4});
  FlopCounter outer, inner;
  {
    FlopCounter::Scope s1(outer);
    mm(a, a);
    {
      FlopCounter::Scope s2(inner);
      FlopCounter::Scope again(outer);  // named twice: still counted once
      mm(a, a);
    }
  }
  EXPECT_EQ(outer.total(), 2 * 128);
  EXPECT_EQ(inner.total(), 128);
}

TEST(FlopCounter, CountsEachThreadApartOrSharedAsScoped) {
  Tensor a = randn({4, 4});
  FlopCounter mine, shared;
  FlopCounter::Scope scope(mine);
  std::thread other([&] { mm(a, a); });  // no scope on that thread
  other.join();
  EXPECT_EQ(mine.total(), 0);
  std::thread t1([&] {
    FlopCounter::Scope s(shared);
    mm(a, a);
  });
  std::thread t2([&] {
    FlopCounter::Scope s(shared);
    mm(a, a);
  });
  t1.join();
  t2.join();
  EXPECT_EQ(shared.total(), 2 * 128);
  EXPECT_EQ(mine.total(), 0);
}

TEST(FlopCounter, CountsTheFusedLstmLayersOwnProducts) {
  manual_seed(0);
  nn::LSTM lstm({.input_size = 3, .hidden_size = 4});
  Tensor x = randn({5, 2, 3});  // (T, B, input)
  FlopCounter counter;
  FlopCounter::Scope scope(counter);
  lstm->forward(x);
  // The input's gates for all T B rows at once (bias_ih + bias_hh as one
  // bias): addmm 2 * 10 * 3 * 16 = 960; h_{t-1} @ W_hh^T every step, inside
  // the fused layer: 5 x 2 * 2 * 4 * 16 = 1280 (counted as mm).
  EXPECT_EQ(counter.by_op(), (Counts{{"addmm", 960}, {"mm", 1280}}));
}

}  // namespace
}  // namespace loom
