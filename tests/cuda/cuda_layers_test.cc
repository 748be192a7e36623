// Every nn layer on the GPU against the same layer on the CPU: the same
// weights (a clone moved to cuda:0), the same input and upstream gradient;
// the output, the input's gradient, every parameter's gradient and every
// buffer (BatchNorm's running statistics) must agree. float64 to 1e-10;
// float32 to 1e-4 (TF32 is off by default; cuDNN and cuBLAS sum in other
// orders than Eigen).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "nn/nn.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom::testing {
namespace {

struct LayerCase {
  std::string name;
  std::function<nn::ModulePtr()> make;
  Shape input;
  int64_t vocabulary = 0;  // > 0: the input is token ids below it
  bool eval = false;       // run in eval mode (BatchNorm's running statistics)
};

std::vector<LayerCase> layer_cases() {
  return {
      {"Linear", [] { return nn::Linear(7, 5).ptr(); }, {4, 7}},
      {"Conv2dStridedPadded",
       [] { return nn::Conv2d({.in_channels = 3, .out_channels = 4, .kernel_size = 3, .stride = 2, .padding = 1}).ptr(); },
       {2, 3, 9, 9}},
      {"Conv2dGroupedDilated",
       [] {
         return nn::Conv2d({.in_channels = 4, .out_channels = 6, .kernel_size = 3, .padding = 2, .dilation = 2, .groups = 2})
             .ptr();
       },
       {2, 4, 8, 8}},
      {"BatchNorm2dTraining", [] { return nn::BatchNorm2d(3).ptr(); }, {4, 3, 5, 5}},
      {"BatchNorm2dEval", [] { return nn::BatchNorm2d(3).ptr(); }, {4, 3, 5, 5}, 0, true},
      {"LayerNorm", [] { return nn::LayerNorm(6).ptr(); }, {3, 4, 6}},
      {"MaxPool2d", [] { return nn::MaxPool2d(2).ptr(); }, {2, 3, 8, 8}},
      {"AvgPool2dPadded", [] { return nn::AvgPool2d(nn::Pool2dOptions{.kernel_size = 3, .stride = 2, .padding = 1}).ptr(); },
       {2, 3, 7, 7}},
      {"AdaptiveAvgPool2d", [] { return nn::AdaptiveAvgPool2d(3).ptr(); }, {2, 3, 7, 7}},
      {"Embedding", [] { return nn::Embedding(10, 4).ptr(); }, {3, 5}, 10},
      {"LSTMTwoLayers", [] { return nn::LSTM({.input_size = 5, .hidden_size = 6, .num_layers = 2}).ptr(); }, {7, 3, 5}},
      {"CausalSelfAttention", [] { return nn::CausalSelfAttention({.embed_dim = 8, .num_heads = 2}).ptr(); }, {2, 5, 8}},
      {"GELU", [] { return nn::GELU().ptr(); }, {4, 6}},
      {"Softmax", [] { return nn::Softmax(-1).ptr(); }, {4, 6}},
      {"SmallCnn",
       [] {
         return nn::Sequential(nn::Conv2d({.in_channels = 1, .out_channels = 4, .kernel_size = 3, .padding = 1}),
                               nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(4 * 4 * 4, 3))
             .ptr();
       },
       {5, 1, 8, 8}},
  };
}

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
