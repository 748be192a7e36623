// Gradients on the GPU against the CPU: the same autograd graph, on the same
// float64 inputs and upstream gradient, run on both devices, for every op
// that has a gradient (the list mirrors tests/autograd/gradcheck_test.cc,
// where the CPU gradients are checked against finite differences).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::gpu;
using Fn = std::function<Tensor(const TensorList&)>;

struct Case {
  std::string name;
  Fn fn;
  std::vector<Shape> shapes;
  double low = -2, high = 2;
};

// An int64 index tensor on the device of `like`.
Tensor index_on(const Tensor& like, std::vector<int64_t> values, const Shape& shape) {
  return from_vector<int64_t>(values, shape, {.dtype = kInt64, .device = like.device()});
}
Tensor index_on(const Tensor& like, std::vector<int64_t> values) {
  const Shape shape{static_cast<int64_t>(values.size())};
  return index_on(like, std::move(values), shape);
}

std::vector<Case> cases() {
  return {
      {"neg", [](auto& x) { return -x[0]; }, {{3, 4}}},
      {"abs", [](auto& x) { return abs(x[0]); }, {{3, 4}}, 0.1, 2},
      {"square", [](auto& x) { return square(x[0]); }, {{3, 4}}},
      {"reciprocal", [](auto& x) { return reciprocal(x[0]); }, {{3, 4}}, 0.5, 2},
      {"exp", [](auto& x) { return exp(x[0]); }, {{3, 4}}},
      {"log", [](auto& x) { return log(x[0]); }, {{3, 4}}, 0.2, 3},
      {"sqrt", [](auto& x) { return sqrt(x[0]); }, {{3, 4}}, 0.2, 3},
      {"rsqrt", [](auto& x) { return rsqrt(x[0]); }, {{3, 4}}, 0.2, 3},
      {"sin", [](auto& x) { return sin(x[0]); }, {{3, 4}}},
      {"cos", [](auto& x) { return cos(x[0]); }, {{3, 4}}},
      {"pow_scalar", [](auto& x) { return pow(x[0], 3.5); }, {{3, 4}}, 0.2, 2},
      {"clamp", [](auto& x) { return clamp(x[0], -0.7, 0.9); }, {{4, 5}}},
      {"tanh", [](auto& x) { return tanh(x[0]); }, {{3, 4}}},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }, {{3, 4}}},
      {"relu", [](auto& x) { return relu(x[0]); }, {{3, 4}}},
      {"gelu", [](auto& x) { return gelu(x[0]); }, {{3, 4}}},
      {"gelu_tanh", [](auto& x) { return gelu(x[0], GeluApproximation::Tanh); }, {{3, 4}}},
      {"add", [](auto& x) { return add(x[0], x[1], 0.7); }, {{3, 4}, {4}}},
      {"sub", [](auto& x) { return sub(x[0], x[1], 1.3); }, {{3, 1}, {1, 4}}},
      {"mul", [](auto& x) { return x[0] * x[1]; }, {{2, 3, 4}, {3, 1}}},
      {"div", [](auto& x) { return x[0] / x[1]; }, {{3, 4}, {4}}, 0.5, 2},
      {"pow_tensor", [](auto& x) { return pow(x[0], x[1]); }, {{3, 4}, {4}}, 0.5, 2},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }, {{3, 4}, {3, 4}}},
      {"minimum", [](auto& x) { return minimum(x[0], x[1]); }, {{3, 4}, {4}}},
      {"lerp", [](auto& x) { return lerp(x[0], x[1], 0.3); }, {{3, 4}, {3, 1}}},
      {"scalar_ops", [](auto& x) { return (2.0 - x[0]) / 3.0 + 1.5 * x[0] - x[0] / 0.5; }, {{3, 4}}},
      {"where", [](auto& x) { return where(x[0] > 0.0, x[0], x[1]); }, {{3, 4}, {4}}},
      {"masked_fill", [](auto& x) { return masked_fill(x[0], x[0] < 0.0, 0.25); }, {{3, 4}}},
      {"sum_all", [](auto& x) { return sum(x[0]); }, {{3, 4}}},
      {"sum_dims", [](auto& x) { return sum(x[0], {0, 2}); }, {{2, 3, 4}}},
      {"sum_keepdim", [](auto& x) { return sum(x[0], {1}, true); }, {{2, 3, 4}}},
      {"mean", [](auto& x) { return mean(x[0], {-1}); }, {{2, 3, 4}}},
      {"amax", [](auto& x) { return amax(x[0], {1, 2}); }, {{2, 3, 4}}},
      {"amin_keepdim", [](auto& x) { return amin(x[0], {0}, true); }, {{3, 4}}},
      {"var", [](auto& x) { return var(x[0], {0, 1}); }, {{3, 4, 2}}},
      {"softmax_last", [](auto& x) { return softmax(x[0], -1); }, {{3, 5}}},
      {"softmax_middle", [](auto& x) { return softmax(x[0], 1); }, {{2, 3, 4}}},
      {"log_softmax", [](auto& x) { return log_softmax(x[0], 0); }, {{3, 4}}},
      {"log_softmax_strided", [](auto& x) { return log_softmax(x[0].t(), 1); }, {{3, 4}}},
      {"log_softmax_wide", [](auto& x) { return log_softmax(x[0], -1); }, {{4, 3000}}},
      {"mm", [](auto& x) { return mm(x[0], x[1]); }, {{3, 4}, {4, 2}}},
      {"mm_transposed", [](auto& x) { return mm(x[0].t(), x[1].t()); }, {{4, 3}, {2, 4}}},
      {"bmm", [](auto& x) { return bmm(x[0], x[1]); }, {{2, 3, 4}, {2, 4, 2}}},
      {"matmul_broadcast", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 1, 3, 4}, {3, 4, 2}}},
      {"matmul_folded", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 5}}},
      {"matmul_vector", [](auto& x) { return matmul(x[0], x[1]); }, {{4}, {3, 4, 2}}},
      {"index_select", [](auto& x) { return index_select(x[0], 0, index_on(x[0], {2, 0, 2})); }, {{3, 4}}},
      {"index_select_dim1", [](auto& x) { return index_select(x[0], 1, index_on(x[0], {3, 1})); }, {{3, 4}}},
      {"gather", [](auto& x) { return gather(x[0], 1, index_on(x[0], {0, 2, 2, 1, 0, 0}, {3, 2})); }, {{3, 4}}},
      {"scatter_add",
       [](auto& x) { return scatter_add(x[0], 0, index_on(x[0], {1, 0, 1, 1, 0, 0}, {2, 3}), x[1]); },
       {{3, 3}, {2, 3}}},
      {"index_add", [](auto& x) { return index_add(x[0], 0, index_on(x[0], {1, 1}), x[1]); }, {{3, 2}, {2, 2}}},
      {"reshape", [](auto& x) { return x[0].reshape({4, 3}) * x[1]; }, {{3, 4}, {3}}},
      {"reshape_copying", [](auto& x) { return x[0].t().reshape({12}); }, {{3, 4}}},
      {"transpose", [](auto& x) { return x[0].transpose(0, 2); }, {{2, 3, 4}}},
      {"permute", [](auto& x) { return x[0].permute({1, 2, 0}) * 2.0; }, {{2, 3, 4}}},
      {"narrow", [](auto& x) { return x[0].narrow(1, 1, 2); }, {{3, 4}}},
      {"slice_step", [](auto& x) { return x[0].slice(1, 0, 4, 2); }, {{3, 4}}},
      {"select", [](auto& x) { return x[0].select(0, 1); }, {{3, 4}}},
      {"expand", [](auto& x) { return x[0].expand({2, 3, 4}); }, {{3, 1}}},
      {"flatten", [](auto& x) { return x[0].flatten(); }, {{2, 3, 2}}},
      {"contiguous", [](auto& x) { return x[0].t().contiguous(); }, {{3, 4}}},
      {"clone", [](auto& x) { return x[0].clone() * x[0]; }, {{3, 4}}},
      {"cat", [](auto& x) { return cat({x[0], x[1]}, 1); }, {{3, 2}, {3, 4}}},
      {"stack", [](auto& x) { return stack({x[0], x[1] * 2.0}, 2); }, {{3, 2}, {3, 2}}},
      {"split", [](auto& x) { return split(x[0], 2, 1)[1] * split(x[0], 2, 1)[0]; }, {{3, 4}}},
      {"to_float32_and_back", [](auto& x) { return x[0].to(kFloat32).to(kFloat64) * x[0]; }, {{3, 4}}},
      {"device_round_trip", [](auto& x) { return x[0].cpu().to(x[1].device()) * x[1]; }, {{3, 4}, {3, 4}}},
      {"layer_norm_by_hand",
       [](auto& x) {
         Tensor mu = mean(x[0], {-1}, true);
         return (x[0] - mu) * rsqrt(var(x[0], {-1}, 0, true) + 1e-5) * x[1];
       },
       {{3, 5}, {5}}},
      {"mlp",
       [](auto& x) {
         Tensor h = gelu(matmul(x[0], x[1]) + x[2]);
         return log_softmax(matmul(h, x[1].t()), -1);
       },
       {{8, 6}, {6, 5}, {5}}},
  };
}

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class CudaGradients : public ::testing::TestWithParam<Case> {};

// Runs c.fn on leaves on `device` made from `inputs`, backpropagates
// `upstream`, and returns the output followed by the inputs' gradients.
TensorList run(const Case& c, const TensorList& inputs, const Tensor& upstream_cpu, Device device) {
  TensorList leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.to(device).detach().requires_grad_());
  Tensor y = c.fn(leaves);
  y.backward(upstream_cpu.to(device));
  TensorList out = {y};
  for (const Tensor& leaf : leaves) out.push_back(leaf.grad());
  return out;
}

TEST_P(CudaGradients, MatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  const Case& c = GetParam();
  TensorList inputs;
  for (size_t i = 0; i < c.shapes.size(); ++i) inputs.push_back(testing::random(c.shapes[i], kFloat64, 900 + i, c.low, c.high));
  // The upstream gradient has the output's shape: find it on the CPU first.
  Tensor probe;
  {
    NoGradGuard no_grad;
    probe = c.fn(inputs);
  }
  Tensor upstream = testing::random(probe.shape(), kFloat64, 999);
  TensorList on_cpu = run(c, inputs, upstream, Device::cpu());
  TensorList on_gpu = run(c, inputs, upstream, testing::gpu_device());
  expect_close(on_gpu[0], on_cpu[0], 1e-10, c.name + " output");
  for (size_t i = 1; i < on_cpu.size(); ++i) {
    ASSERT_EQ(on_gpu[i].defined(), on_cpu[i].defined()) << c.name << " gradient " << i - 1;
    if (on_cpu[i].defined()) expect_close(on_gpu[i], on_cpu[i], 1e-10, c.name + " gradient of input " + std::to_string(i - 1));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaGradients, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(CudaGradientsFloat32, ATrainingStepMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  // A small classifier in float32: forward, loss, backward on both devices.
  Tensor x = testing::random({64, 20}, kFloat32, 1), w1 = testing::random({20, 32}, kFloat32, 2, -0.3, 0.3);
  Tensor w2 = testing::random({32, 10}, kFloat32, 3, -0.3, 0.3);
  Tensor labels = randint(0, 10, {64, 1}, {.dtype = kInt64}, nullptr);
  auto step = [&](Device device) {
    Tensor a = w1.to(device).detach().requires_grad_(), b = w2.to(device).detach().requires_grad_();
    Tensor logp = log_softmax(matmul(relu(matmul(x.to(device), a)), b), -1);
    Tensor loss = -mean(gather(logp, 1, labels.to(device)));
    loss.backward();
    return TensorList{loss, a.grad(), b.grad()};
  };
  TensorList cpu_result = step(Device::cpu()), gpu_result = step(testing::gpu_device());
  expect_close(gpu_result[0], cpu_result[0], 1e-5, "loss");
  expect_close(gpu_result[1], cpu_result[1], 1e-4, "d w1");
  expect_close(gpu_result[2], cpu_result[2], 1e-4, "d w2");
}

}  // namespace
}  // namespace loom
