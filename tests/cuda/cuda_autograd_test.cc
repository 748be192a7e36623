// Gradients on the GPU against the CPU: the same autograd graph, on the same
// float64 inputs and upstream gradient, run on both devices, for every op of
// tests/autograd/op_cases.h — the table whose CPU gradients gradcheck_test
// checks against finite differences.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "autograd/checkpoint.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tensor/cuda/stream.h"
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

// ---- the engine, checkpointing and optimizers on the GPU ----

// Backward queues every node on the calling thread's current stream (not on
// its forward's, as PyTorch would): a forward and its backward both on a
// side stream, as a DataParallel replica or pipeline stage runs them on its
// queue, give what the default stream gives.
TEST(CudaAutograd, ForwardAndBackwardOnASideStream) {
  LOOM_REQUIRE_CUDA();
  const Tensor x = testing::random({512, 64}, kFloat64, 11), w = testing::random({64, 32}, kFloat64, 12);
  auto step = [&](const cuda::Stream& stream) {
    cuda::StreamGuard on(stream);
    Tensor leaf = gpu(w).detach().requires_grad_();
    Tensor loss = tanh(matmul(gpu(x), leaf)).square().sum();
    loss.backward();
    stream.synchronize();  // the results are read on the default stream
    return TensorList{loss, leaf.grad()};
  };
  const TensorList on_default = step(cuda::current_stream(0)), on_side = step(cuda::Stream::from_pool(0));
  expect_close(on_side[0], on_default[0], 1e-12, "loss");
  expect_close(on_side[1], on_default[1], 1e-12, "d w");
}

// AddBackward sends one gradient tensor to both leaves: each leaf's .grad()
// must still be its own memory, or the second backward adds twice into both.
TEST(CudaAutograd, LeavesNeverShareTheirGradientMemory) {
  LOOM_REQUIRE_CUDA();
  Tensor a = gpu(from_vector<double>({1, 2})).requires_grad_(), b = gpu(from_vector<double>({3, 4})).requires_grad_();
  for (int i = 0; i < 2; ++i) (a + b).backward(gpu(from_vector<double>({1, 1})));
  EXPECT_NE(a.grad().storage(), b.grad().storage());
  testing::expect_values(a.grad(), {2, 2});
  testing::expect_values(b.grad(), {2, 2});
}

// A graph recorded on the CPU whose leaves then moved to the GPU (Module::to
// between forward and backward): adding its CPU gradients into the CUDA
// .grad() had a kernel read host memory. It is an error, and the GPU works on.
TEST(CudaAutograd, AGradientLeftOnTheCpuByAMovedLeafIsAnError) {
  LOOM_REQUIRE_CUDA();
  nn::Linear layer(4, 2);
  layer->forward(ones({3, 4})).sum().backward();  // a .grad() to add into: 3 everywhere
  Tensor loss = layer->forward(ones({3, 4})).sum();
  layer->to(testing::gpu_device());
  EXPECT_THROW_MSG(loss.backward(), "was it moved or converted between the forward and this backward?");
  ASSERT_EQ(layer->weight.grad().device(), testing::gpu_device());
  EXPECT_NEAR(sum(layer->weight.grad()).item(), 2 * 4 * 3, 1e-5);
}

// BatchNorm with its module left on the CPU and the input on the GPU: an
// error naming both, before the running statistics change (they were
// scaled by 1 - momentum in place, then the update's add threw).
TEST(CudaAutograd, BatchNormOnAnotherDeviceThanItsInputIsAnErrorThatChangesNothing) {
  LOOM_REQUIRE_CUDA();
  nn::BatchNorm2d bn(3);
  bn->running_mean.fill_(1.0);
  EXPECT_THROW_MSG(bn->forward(gpu(testing::random({2, 3, 4, 4}, kFloat32, 1))),
                   "batch_norm: the input is on cuda:0 but a per-channel tensor");
  testing::expect_values(bn->running_mean, {1, 1, 1});
}

// Checkpointed Dropout on the GPU draws the forward's numbers in the replay
// (the (seed, offset) pairs are kernel arguments, so streams do not matter),
// also while other threads, each on a stream of its own, draw meanwhile.
TEST(CudaAutograd, CheckpointReplaysDropoutOnTheGpu) {
  LOOM_REQUIRE_CUDA();
  manual_seed(3);
  nn::Sequential plain(nn::Linear(32, 32), nn::Tanh(), nn::Dropout(0.5), nn::Linear(32, 32), nn::Dropout(0.3));
  plain->to(kFloat64);
  plain->to(testing::gpu_device());
  nn::Sequential checkpointed(plain->clone());
  const Tensor x = gpu(testing::random({16, 32}, kFloat64, 4));
  manual_seed(8);
  plain->forward(x).square().sum().backward();
  manual_seed(8);
  nn::checkpoint_sequential(checkpointed, 2, x).square().sum().backward();
  const TensorList a = plain->parameters(), b = checkpointed->parameters();
  for (size_t i = 0; i < a.size(); ++i) expect_close(b[i].grad(), a[i].grad(), 1e-12, "parameter " + std::to_string(i));

  constexpr int kThreads = 3;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      cuda::StreamGuard own(cuda::Stream::from_pool(0));
      for (int step = 0; step < 100; ++step) {
        Tensor in = ones({4096}, {.device = testing::gpu_device()}).requires_grad_();
        Tensor y = autograd::checkpoint([](const Tensor& v) { return nn::functional::dropout(v, 0.5, true); }, in);
        y.sum().backward();
        if (!allclose(in.grad(), y.detach(), 0, 0)) ++mismatches[t];  // dy/dx is the mask: y itself
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(kThreads, 0));
}

// One optimizer over parameters on the CPU and the GPU in three dtypes: more
// than one fused launch packs (56), one larger than a block's chunk, one
// without a gradient in the first step (its state starts a step later), a
// strided gradient, and clipping across both devices first. The parameters
// end where an all-CPU run's do.
TEST(CudaOptimizers, MixedDevicesAndDtypesStepAsOnTheCpu) {
  LOOM_REQUIRE_CUDA();
  constexpr int kParams = 70;
  auto dtype_of_param = [](int i) { return i % 3 == 0 ? kFloat64 : i % 3 == 1 ? kFloat32 : kBFloat16; };
  auto train = [&](Device device, bool adam) {
    TensorList params;
    for (int i = 0; i < kParams; ++i) {
      const Shape shape = i == 5 ? Shape{70, 100} : Shape{1 + (i * 13) % 50};
      Tensor p = testing::random(shape, dtype_of_param(i), 100 + i).to(i % 4 == 0 ? Device::cpu() : device);
      params.push_back(p.detach().requires_grad_());
    }
    std::unique_ptr<optim::Optimizer> opt;
    if (adam)
      opt = std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
    else
      opt = std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
    Tensor norm;
    for (int step = 0; step < 3; ++step) {
      for (int i = 0; i < kParams; ++i) {
        const Tensor& p = params[i];
        Tensor g = testing::random(p.shape(), p.dtype(), 1000 * (step + 1) + i).to(p.device());
        p.set_grad(step == 0 && i % 7 == 0 ? Tensor() : i == 9 ? testing::non_contiguous(g) : g);
      }
      norm = optim::clip_grad_norm_(params, 5.0);
      opt->step();
    }
    params.push_back(norm);
    return params;
  };
  for (bool adam : {false, true}) {
    const TensorList on_gpu = train(testing::gpu_device(), adam), on_cpu = train(Device::cpu(), adam);
    for (int i = 0; i <= kParams; ++i) {
      const DType dtype = i < kParams ? dtype_of_param(i) : kFloat64;
      const double tol = dtype == kFloat64 ? 1e-12 : dtype == kFloat32 ? 1e-5 : 1e-2;
      EXPECT_LE(testing::max_rel_error(on_gpu[i], on_cpu[i]), tol)
          << (adam ? "AdamW" : "SGD") << (i < kParams ? ", parameter " + std::to_string(i) : ", the clipped norm");
    }
  }
}

}  // namespace
}  // namespace loom
