// Gradients on the GPU against the CPU: the same autograd graph, on the same
// float64 inputs and upstream gradient, run on both devices, for every op of
// tests/autograd/op_cases.h — the table whose CPU gradients gradcheck_test
// checks against finite differences.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/autograd/op_cases.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::gpu;
using testing::OpCase;


class CudaGradients : public ::testing::TestWithParam<OpCase> {};

// Runs c.fn on leaves on `device` made from `inputs`, backpropagates
// `upstream`, and returns the output followed by the inputs' gradients.
TensorList run(const OpCase& c, const TensorList& inputs, const Tensor& upstream_cpu, Device device) {
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
  const OpCase& c = GetParam();
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

INSTANTIATE_TEST_SUITE_P(AllOps, CudaGradients, ::testing::ValuesIn(testing::op_cases()),
                         [](const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; });

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
