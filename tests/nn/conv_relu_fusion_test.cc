// The fused convolution + ReLU (functional::conv2d_relu, and nn::Sequential
// running a Conv2d and the ReLU after it as one op) against the two ops run
// one after the other: the same values and the same gradients, bit for bit,
// and against finite differences in float64.
#include <gtest/gtest.h>

#include <algorithm>

#include "autograd/gradcheck.h"
#include "nn/nn.h"
#include "tests/test_util.h"

namespace loom {
namespace {

namespace F = nn::functional;
using testing::values;

struct Case {
  const char* name;
  Shape x, w;  // input (N, C, H, W) and weight (O, C / groups, kH, kW)
  Conv2dParams p;
  bool bias;
};

// The CPU kernel's paths: images of 512+ output pixels multiplied a sample at
// a time, blocks of several samples, a block of one sample without a bias
// (its product is written in place), a shallow layer's own kernels, strides
// and groups.
std::vector<Case> cases() {
  return {
      {"wide image", {3, 2, 24, 24}, {5, 2, 3, 3}, {.pad_h = 1, .pad_w = 1}, true},
      {"blocks of samples", {7, 3, 9, 9}, {4, 3, 3, 3}, {.pad_h = 1, .pad_w = 1}, true},
      {"one sample, no bias", {1, 3, 6, 6}, {4, 3, 3, 3}, {}, false},
      {"one channel (shallow_conv.h)", {5, 1, 13, 11}, {5, 1, 3, 3}, {.pad_h = 1, .pad_w = 1}, true},
      {"stride and groups", {4, 4, 10, 10}, {6, 2, 3, 3}, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .groups = 2}, true},
  };
}

struct Result {
  Tensor y, dx, dw, db;
};

// y = relu(conv2d(x, w, b)) by `fused` or not, and the gradients of sum(y * probe).
Result run(const Case& c, bool fused, DType dtype) {
  manual_seed(7);
  Tensor x = randn(c.x).to(dtype).requires_grad_(true);
  Tensor w = randn(c.w).to(dtype).requires_grad_(true);
  Tensor b = c.bias ? randn({c.w[0]}).to(dtype).requires_grad_(true) : Tensor();
  Tensor y = fused ? F::conv2d_relu(x, w, b, c.p) : relu(F::conv2d(x, w, b, c.p));
  Tensor probe = randn(y.shape()).to(dtype);  // a gradient with both signs everywhere
  (y * probe).sum().backward();
  return {y.detach(), x.grad(), w.grad(), c.bias ? b.grad() : Tensor()};
}

void expect_identical(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(values(a), values(b)) << what;
}

TEST(ConvReluFusion, SameValuesAndGradientsAsConvThenRelu) {
  for (DType dtype : {kFloat32, kFloat64, kBFloat16})
    for (const Case& c : cases()) {
      const std::string name = c.name + std::string(" ") + dtype_name(dtype);
      const Result fused = run(c, true, dtype), separate = run(c, false, dtype);
      // Some outputs are clipped and some are not, so the mask matters.
      const std::vector<double> y = values(fused.y);
      ASSERT_GT(std::count(y.begin(), y.end(), 0.0), 0) << name;
      ASSERT_LT(std::count(y.begin(), y.end(), 0.0), static_cast<long>(y.size())) << name;
      expect_identical(fused.y, separate.y, name + " output");
      expect_identical(fused.dx, separate.dx, name + " input gradient");
      expect_identical(fused.dw, separate.dw, name + " weight gradient");
      if (c.bias) expect_identical(fused.db, separate.db, name + " bias gradient");
    }
}

TEST(ConvReluFusion, MatchesFiniteDifferences) {
  for (const Case& c : cases()) {
    Tensor x = testing::leaf64(c.x, 1), w = testing::leaf64(c.w, 2);
    Tensor b = c.bias ? testing::leaf64({c.w[0]}, 3) : Tensor();
    TensorList inputs = {x, w};
    if (c.bias) inputs.push_back(b);
    autograd::GradcheckResult r = autograd::gradcheck(
        [&c](const TensorList& in) { return F::conv2d_relu(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), c.p); },
        inputs);
    EXPECT_TRUE(r.ok) << c.name << ": " << r.message;
  }
}

// nn::Sequential fuses a Conv2d with the ReLU after it; its output and
// gradients equal running its children one by one.
TEST(ConvReluFusion, SequentialEqualsItsChildrenInTurn) {
  manual_seed(3);
  nn::Sequential net(nn::Conv2d({.in_channels = 1, .out_channels = 4, .kernel_size = 3, .padding = 1}), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Conv2d({.in_channels = 4, .out_channels = 6, .kernel_size = 3}),
                     nn::Conv2d({.in_channels = 6, .out_channels = 3, .kernel_size = 1}), nn::ReLU(), nn::Flatten());
  Tensor x = randn({5, 1, 10, 10});
  auto gradients = [&net] {
    TensorList grads;
    for (const Tensor& p : net->parameters()) grads.push_back(p.grad().clone());
    net->zero_grad();
    return grads;
  };
  Tensor fused = net->forward(x);
  fused.sum().backward();
  const TensorList fused_grads = gradients();
  Tensor separate = x;
  for (size_t i = 0; i < net->size(); ++i) separate = (*net)[i]->forward(separate);
  separate.sum().backward();
  const TensorList separate_grads = gradients();
  expect_identical(fused, separate, "output");
  ASSERT_EQ(fused_grads.size(), separate_grads.size());
  for (size_t k = 0; k < fused_grads.size(); ++k)
    expect_identical(fused_grads[k], separate_grads[k], "parameter " + std::to_string(k));
}

}  // namespace
}  // namespace loom
