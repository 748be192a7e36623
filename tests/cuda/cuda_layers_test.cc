// Every nn layer (tests/nn/layer_cases.h, whose CPU gradients
// nn_gradcheck_test checks against finite differences) on the GPU against the
// same layer on the CPU: the same
// weights (a clone moved to cuda:0), the same input and upstream gradient;
// the output, the input's gradient, every parameter's gradient and every
// buffer (BatchNorm's running statistics) must agree. float64 to 1e-10;
// float32 to 1e-4 (TF32 is off by default; cuDNN and cuBLAS sum in other
// orders than Eigen).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "nn/nn.h"
#include "tests/nn/layer_cases.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::testing {
namespace {

struct CudaLayerParam {
  LayerCase layer;
  DType dtype;
};

class CudaLayers : public ::testing::TestWithParam<CudaLayerParam> {};

TEST_P(CudaLayers, MatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  const LayerCase& c = GetParam().layer;
  const DType dtype = GetParam().dtype;
  const double tol = dtype == kFloat64 ? 1e-10 : 1e-4;
  manual_seed(3);
  nn::ModulePtr on_cpu = c.make();
  on_cpu->to(dtype);
  nn::ModulePtr on_gpu = on_cpu->clone();
  on_gpu->to(gpu_device());
  if (c.eval) {
    // Running statistics that are not the initial ones, so eval mode uses them.
    NoGradGuard no_grad;
    for (const Tensor& b : on_cpu->buffers())
      if (is_floating(b.dtype())) b.copy_(random(b.shape(), b.dtype(), 5, 0.5, 1.5));
    for (size_t i = 0; i < on_cpu->buffers().size(); ++i) on_gpu->buffers()[i].copy_(on_cpu->buffers()[i]);
    on_cpu->eval();
    on_gpu->eval();
  }

  Tensor x_cpu, x_gpu;
  if (c.vocabulary > 0) {
    Generator g(7);
    x_cpu = randint(0, c.vocabulary, c.input, {.dtype = kInt64}, &g);
    x_gpu = gpu(x_cpu);
  } else {
    x_cpu = random(c.input, dtype, 7).requires_grad_();
    x_gpu = gpu(x_cpu.detach()).requires_grad_();
  }
  Tensor y_cpu = on_cpu->forward(x_cpu), y_gpu = on_gpu->forward(x_gpu);
  expect_close(y_gpu, y_cpu, tol, c.name + ": output");

  Tensor upstream = random(y_cpu.shape(), dtype, 9);
  (y_cpu * upstream).sum().backward();
  (y_gpu * gpu(upstream)).sum().backward();
  if (c.vocabulary == 0) expect_close(x_gpu.grad(), x_cpu.grad(), tol, c.name + ": input gradient");
  const TensorList p_cpu = on_cpu->parameters(), p_gpu = on_gpu->parameters();
  ASSERT_EQ(p_cpu.size(), p_gpu.size());
  for (size_t i = 0; i < p_cpu.size(); ++i)
    expect_close(p_gpu[i].grad(), p_cpu[i].grad(), tol, c.name + ": gradient of parameter " + std::to_string(i));
  const TensorList b_cpu = on_cpu->buffers(), b_gpu = on_gpu->buffers();
  for (size_t i = 0; i < b_cpu.size(); ++i)
    if (is_floating(b_cpu[i].dtype()))
      expect_close(b_gpu[i], b_cpu[i], tol, c.name + ": buffer " + std::to_string(i));
}

std::vector<CudaLayerParam> params() {
  std::vector<CudaLayerParam> out;
  for (DType dtype : {kFloat64, kFloat32})
    for (const LayerCase& c : layer_cases()) out.push_back({c, dtype});
  return out;
}

INSTANTIATE_TEST_SUITE_P(EveryLayer, CudaLayers, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<CudaLayerParam>& info) {
                           return info.param.layer.name + (info.param.dtype == kFloat64 ? "Float64" : "Float32");
                         });

}  // namespace
}  // namespace loom::testing
