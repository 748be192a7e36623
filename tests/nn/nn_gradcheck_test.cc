// Every layer's gradients, for inputs and parameters, against finite
// differences in float64.
#include <gtest/gtest.h>

#include "autograd/gradcheck.h"
#include "nn/nn.h"
#include "tests/nn/layer_cases.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using autograd::gradcheck;
using testing::leaf64;
namespace F = nn::functional;

void expect_gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs) {
  autograd::GradcheckResult r = gradcheck(fn, inputs);
  EXPECT_TRUE(r.ok) << r.message;
}

// A module in float64, checked for its input and all its parameters at once.
void expect_module_gradcheck(nn::Module& m, const Tensor& x) {
  m.to(kFloat64);
  TensorList inputs = {x};
  for (const Tensor& p : m.parameters()) inputs.push_back(p);
  expect_gradcheck([&m](const TensorList& in) { return m.forward(in[0]); }, inputs);
}

TEST(NnGradcheck, Conv2dVariants) {
  std::vector<Conv2dParams> variants = {
      {}, {.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2}, {.pad_h = 1, .pad_w = 1, .dilation_h = 2, .dilation_w = 2},
      {.groups = 2}};
  for (const Conv2dParams& p : variants) {
    Tensor x = leaf64({2, 4, 5, 5}, 1), w = leaf64({4, 4 / p.groups, 3, 3}, 2), b = leaf64({4}, 3);
    expect_gradcheck([p](const TensorList& in) { return F::conv2d(in[0], in[1], in[2], p); }, {x, w, b});
  }
  // A non-contiguous input.
  Tensor x = leaf64({2, 5, 5, 3}, 4), w = leaf64({2, 3, 2, 2}, 5);
  expect_gradcheck([](const TensorList& in) { return F::conv2d(in[0].permute({0, 3, 1, 2}), in[1]); }, {x, w});
}

TEST(NnGradcheck, Pooling) {
  // Distinct values keep max pooling away from ties, where it is not differentiable.
  Tensor x = sin(arange(0, 2 * 3 * 6 * 6, 1, {.dtype = kFloat64}).reshape({2, 3, 6, 6}) * 0.37) * 3.0;
  x = x.detach().contiguous().requires_grad_();
  expect_gradcheck([](const TensorList& in) {
    return F::max_pool2d(in[0], {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1});
  }, {x});
  // Unpadded: windows that tile the input (rows and columns left over at the
  // edge), and overlapping ones; the CPU kernels take a path of their own for each.
  Tensor odd = sin(arange(0, 2 * 3 * 7 * 5, 1, {.dtype = kFloat64}).reshape({2, 3, 7, 5}) * 0.41) * 3.0;
  odd = odd.detach().contiguous().requires_grad_();
  expect_gradcheck([](const TensorList& in) {
    return F::max_pool2d(in[0], {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2});
  }, {odd});
  expect_gradcheck([](const TensorList& in) {
    return F::max_pool2d(in[0], {.kernel_h = 3, .kernel_w = 2, .stride_h = 1, .stride_w = 1});
  }, {odd});
  expect_gradcheck([](const TensorList& in) {
    return F::avg_pool2d(in[0], {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1});
  }, {x});
  expect_gradcheck([](const TensorList& in) { return F::adaptive_avg_pool2d(in[0], 4, 5); }, {x});
}

TEST(NnGradcheck, Normalisation) {
  Tensor x = leaf64({3, 4, 5}, 6), w = leaf64({5}, 7), b = leaf64({5}, 8);
  expect_gradcheck([](const TensorList& in) { return F::layer_norm(in[0], {5}, in[1], in[2]); }, {x, w, b});
  expect_gradcheck([](const TensorList& in) { return F::layer_norm(in[0], {4, 5}); }, {x});
  Tensor x4 = leaf64({4, 3, 2, 2}, 9), g = leaf64({3}, 10), beta = leaf64({3}, 11);
  expect_gradcheck([](const TensorList& in) {
    return F::batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], /*training=*/true);
  }, {x4, g, beta});
}

TEST(NnGradcheck, EmbeddingDropoutAttentionLosses) {
  Tensor table = leaf64({5, 3}, 12);
  Tensor ids = from_vector<int64_t>({4, 1, 4, 0}, {2, 2});
  expect_gradcheck([ids](const TensorList& in) { return F::embedding(ids, in[0]); }, {table});
  Tensor x = leaf64({4, 6}, 13);
  // A fresh generator with the same seed: the same mask at every evaluation.
  expect_gradcheck([](const TensorList& in) {
    Generator g(5);
    return F::dropout(in[0], 0.3, true, &g);
  }, {x});
  Tensor q = leaf64({2, 2, 4, 3}, 14), k = leaf64({2, 2, 4, 3}, 15), v = leaf64({2, 2, 4, 3}, 16);
  expect_gradcheck([](const TensorList& in) { return F::scaled_dot_product_attention(in[0], in[1], in[2], true); },
                   {q, k, v});
  Tensor logits = leaf64({5, 4}, 17);
  Tensor targets = from_vector<int64_t>({3, 0, -100, 1, 3});
  expect_gradcheck([targets](const TensorList& in) { return F::cross_entropy(in[0], targets); }, {logits});
  Tensor a = leaf64({3, 2}, 18), b = leaf64({3, 2}, 19);
  expect_gradcheck([](const TensorList& in) { return F::mse_loss(in[0], in[1]); }, {a, b});
}

TEST(NnGradcheck, Layers) {
  manual_seed(20);
  nn::Linear fc(4, 3);
  expect_module_gradcheck(*fc, leaf64({2, 5, 4}, 21));
  nn::LSTM lstm({.input_size = 3, .hidden_size = 2, .num_layers = 2, .batch_first = true});
  expect_module_gradcheck(*lstm, leaf64({2, 3, 3}, 25));
}

// Every layer of the shared table (layer_cases.h, which the GPU test also
// runs): its input's and parameters' gradients in float64.
class EveryLayer : public ::testing::TestWithParam<testing::LayerCase> {};

TEST_P(EveryLayer, MatchesFiniteDifferences) {
  const testing::LayerCase& c = GetParam();
  manual_seed(3);
  nn::ModulePtr m = c.make();
  m->to(kFloat64);
  if (c.eval) {  // running statistics that are not the initial ones, so eval mode uses them
    NoGradGuard no_grad;
    Generator g(5);
    for (const Tensor& b : m->buffers())
      if (is_floating(b.dtype())) b.copy_(uniform(b.shape(), 0.5, 1.5, {.dtype = kFloat64}, &g));
    m->eval();
  }
  if (c.vocabulary > 0) {  // token ids: only the parameters have gradients
    Generator g(7);
    const Tensor ids = randint(0, c.vocabulary, c.input, {.dtype = kInt64}, &g);
    expect_gradcheck([&](const TensorList&) { return m->forward(ids); }, m->parameters());
    return;
  }
  expect_module_gradcheck(*m, leaf64(c.input, 7));
}

INSTANTIATE_TEST_SUITE_P(Table, EveryLayer, ::testing::ValuesIn(testing::layer_cases()),
                         [](const ::testing::TestParamInfo<testing::LayerCase>& info) { return info.param.name; });

}  // namespace
}  // namespace loom
