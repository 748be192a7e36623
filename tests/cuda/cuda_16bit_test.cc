// bfloat16 and float16 on the GPU against the same ops on the CPU, which
// compute in float32 and round once (tensor/cpu/float32_compute.h): the GPU
// kernels compute in float too, so the two differ by at most an ulp or two
// of the 16-bit result (from float32 steps taken in another order), and
// conversions agree bit for bit.
#include <gtest/gtest.h>

#include "nn/nn.h"
#include "tensor/autocast.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::gpu;
using testing::random;
using testing::values;
namespace F = nn::functional;

class Cuda16Bit : public ::testing::TestWithParam<DType> {
 protected:
  // Two ulps of a value near 1: 2^-7 for bfloat16, 2^-10 for float16.
  // expect_close divides by max(1, |b|), so an ulp of a result of any size
  // is at most tol() / 2: results rounded once from float on both devices
  // need no more, however large they are or how many terms they sum.
  double tol() const { return GetParam() == kBFloat16 ? 1.6e-2 : 2e-3; }
  Tensor rand(const Shape& shape, uint64_t seed) const { return random(shape, kFloat32, seed).to(GetParam()); }
};

TEST_P(Cuda16Bit, ConversionsAgreeBitForBit) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({1000}, kFloat32, 1, -70000, 70000);  // beyond float16's range too
  expect_equal(gpu(x).to(dtype).cpu(), x.to(dtype), "float32 -> 16 bits");
  Tensor h = x.to(dtype);
  expect_equal(gpu(h).to(kFloat32).cpu(), h.to(kFloat32), "16 bits -> float32");
  expect_equal(gpu(h).to(kFloat64).cpu(), h.to(kFloat64), "16 bits -> float64");
  const DType other = dtype == kBFloat16 ? kFloat16 : kBFloat16;
  expect_equal(gpu(h).to(other).cpu(), h.to(other), "between the 16-bit types");
  expect_equal(full({5}, 0.1, {.dtype = dtype, .device = testing::gpu_device()}).cpu(), full({5}, 0.1, {.dtype = dtype}),
               "fill");
}

// Draws are the CPU's (random_draw.h) taken through float32 and rounded.
TEST_P(Cuda16Bit, RandomDrawsAreTheCpus) {
  LOOM_REQUIRE_CUDA();
  Generator on_cpu(5), on_gpu(5);
  expect_equal(uniform({500}, -1, 1, {.dtype = GetParam(), .device = testing::gpu_device()}, &on_gpu).cpu(),
               uniform({500}, -1, 1, {.dtype = GetParam()}, &on_cpu), "uniform");
  expect_equal(bernoulli({500}, 0.3, {.dtype = GetParam(), .device = testing::gpu_device()}, &on_gpu).cpu(),
               bernoulli({500}, 0.3, {.dtype = GetParam()}, &on_cpu), "bernoulli");
}

TEST_P(Cuda16Bit, ElementwiseOpsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  Tensor a = rand({33, 17}, 2), b = rand({33, 17}, 3), row = rand({17}, 4);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>>> ops = {
      {"exp", [](const Tensor& x, const Tensor&, const Tensor&) { return exp(x); }},
      {"tanh", [](const Tensor& x, const Tensor&, const Tensor&) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x, const Tensor&, const Tensor&) { return sigmoid(x); }},
      {"relu", [](const Tensor& x, const Tensor&, const Tensor&) { return relu(x); }},
      {"gelu", [](const Tensor& x, const Tensor&, const Tensor&) { return gelu(x, GeluApproximation::Tanh); }},
      {"neg", [](const Tensor& x, const Tensor&, const Tensor&) { return -x; }},
      {"add broadcast", [](const Tensor& x, const Tensor&, const Tensor& r) { return x + r; }},
      {"mul", [](const Tensor& x, const Tensor& y, const Tensor&) { return x * y; }},
      {"div", [](const Tensor& x, const Tensor& y, const Tensor&) { return x / (abs(y) + 1); }},
      {"maximum", [](const Tensor& x, const Tensor& y, const Tensor&) { return maximum(x, y); }},
      {"where", [](const Tensor& x, const Tensor& y, const Tensor&) { return where(x > y, x, y); }},
      {"transposed copy", [](const Tensor& x, const Tensor&, const Tensor&) { return x.t().contiguous(); }},
  };
  for (const auto& [name, op] : ops)
    expect_close(op(gpu(a), gpu(b), gpu(row)), op(a, b, row), tol(), name);
  expect_equal((gpu(a) < gpu(b)).cpu(), a < b, "less than");
}

TEST_P(Cuda16Bit, ReductionsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  Tensor a = rand({24, 300}, 5);
  // Summed in double, rounded once on both devices. (tol() * 8 would pass a
  // row sum of ~20 that missed a term.)
  expect_close(gpu(a).sum({1}), a.sum({1}), tol(), "sum of rows");
  expect_close(gpu(a).sum({0}), a.sum({0}), tol(), "sum of columns");
  expect_close(gpu(a).max({1}), a.max({1}), 0, "max");
  expect_equal(gpu(a).argmax(1).cpu(), a.argmax(1), "argmax");
  // Long rows, split over blocks and read 8 to a load: the first starts on a
  // 16-byte boundary, the others off one.
  Tensor rows = rand({3, 50001}, 6);
  expect_close(gpu(rows).sum({1}), rows.sum({1}), tol(), "sum of long rows");
  expect_close(gpu(rows).min({1}), rows.min({1}), 0, "min of long rows");
  expect_equal(gpu(rows).argmax(1).cpu(), rows.argmax(1), "argmax of long rows");
}

// Softmax over rows held by a warp, by a block, too long for registers, and
// along a dim that is not the last; with their gradients.
TEST_P(Cuda16Bit, SoftmaxAndLogSoftmaxMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  for (const Shape& shape : {Shape{6, 100}, Shape{3, 5000}, Shape{2, 20000}, Shape{4, 30, 5}})
    for (bool log : {false, true}) {
      const int dim = shape.size() == 3 ? 1 : -1;
      auto run = [&](Device device) {
        Tensor x = rand(shape, 13).to(device).requires_grad_(true);
        Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        (y * rand(shape, 14).to(device)).sum().backward();
        return std::make_pair(y.detach(), x.grad());
      };
      const auto [y_gpu, dx_gpu] = run(testing::gpu_device());
      const auto [y_cpu, dx_cpu] = run(Device::cpu());
      const std::string name = std::string(log ? "log_softmax " : "softmax ") + ::testing::PrintToString(shape);
      expect_close(y_gpu, y_cpu, tol(), name);  // in float, rounded once: log-probabilities of ~-10 too
      expect_close(dx_gpu, dx_cpu, tol(), name + " gradient");
    }
}

TEST_P(Cuda16Bit, CausalAttentionSoftmaxMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  for (int64_t t : {64, 2000}) {  // a warp per row, a block per row
    auto run = [&](Device device) {
      Tensor x = (rand({3, t, t}, 24) * 4).to(device).requires_grad_(true);
      Tensor y = attention_softmax(x, 0.125, true);
      (y.to(kFloat32) * rand({3, t, t}, 25).to(kFloat32).to(device)).sum().backward();
      return TensorList{y.detach(), x.grad()};
    };
    const TensorList on_gpu = run(testing::gpu_device()), on_cpu = run(Device::cpu());
    expect_close(on_gpu[0], on_cpu[0], tol(), "attention_softmax T " + std::to_string(t));
    expect_close(on_gpu[1], on_cpu[1], tol(), "attention_softmax gradient T " + std::to_string(t));
  }
}

TEST_P(Cuda16Bit, LayerNormMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  for (int64_t cols : {64, 3000}) {  // a warp per row, a block per row
    auto run = [&](Device device) {
      Tensor x = rand({5, cols}, 15).to(device).requires_grad_(true);
      Tensor w = rand({cols}, 16).to(device).requires_grad_(true);
      Tensor b = rand({cols}, 17).to(device).requires_grad_(true);
      Tensor y = F::layer_norm(x, {cols}, w, b, 1e-5);
      (y * rand({5, cols}, 18).to(device)).sum().backward();
      return TensorList{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const TensorList on_gpu = run(testing::gpu_device()), on_cpu = run(Device::cpu());
    const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
    for (int k = 0; k < 4; ++k)  // each in float, rounded once
      expect_close(on_gpu[k], on_cpu[k], tol(), std::string("layer_norm ") + names[k] + " cols " +
                                                        std::to_string(cols));
  }
}

TEST_P(Cuda16Bit, LstmCellMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  auto run = [&](Device device) {
    Tensor xg = (rand({6, 4 * 40}, 19) * 2).to(device).requires_grad_(true);
    Tensor hg = (rand({6, 4 * 40}, 20) * 2).to(device).requires_grad_(true);
    Tensor c_prev = rand({6, 40}, 21).to(device).requires_grad_(true);
    auto [h, c] = F::lstm_cell(xg, hg, c_prev);
    ((h * rand({6, 40}, 22).to(device)).sum() + (c * rand({6, 40}, 23).to(device)).sum()).backward();
    return TensorList{h.detach(), c.detach(), xg.grad(), hg.grad(), c_prev.grad()};
  };
  const TensorList on_gpu = run(testing::gpu_device()), on_cpu = run(Device::cpu());
  const char* names[] = {"h", "c", "input gates gradient", "hidden gates gradient", "c_prev gradient"};
  for (int k = 0; k < 5; ++k)  // each in float, rounded once
    expect_close(on_gpu[k], on_cpu[k], tol(), std::string("lstm_cell ") + names[k]);
}

// Average and adaptive pooling, an embedding lookup (index_select, and
// index_add backward: 2-byte elements) and gather (scatter_add backward).
TEST_P(Cuda16Bit, AveragePoolingAndIndexOpsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  Tensor idx = from_vector<int64_t>({3, 0, 3, 7, 1}, {5}, {.dtype = kInt64});
  Tensor picks = from_vector<int64_t>({2, 0, 1, 2}, {4, 1}, {.dtype = kInt64});
  auto run = [&](Device device) {
    Tensor x = rand({2, 3, 9, 9}, 19).to(device).requires_grad_(true);
    Tensor table = rand({8, 6}, 20).to(device).requires_grad_(true);
    Tensor rows = rand({4, 3}, 21).to(device).requires_grad_(true);
    Tensor pooled = F::avg_pool2d(x, {.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1,
                                      .pad_w = 1});
    Tensor adaptive = F::adaptive_avg_pool2d(x, 4, 4);
    Tensor looked_up = F::embedding(idx.to(device), table);
    Tensor gathered = gather(rows, 1, picks.to(device));
    (pooled.sum() + 2 * adaptive.sum() + (looked_up * looked_up).sum() + 3 * gathered.sum()).backward();
    return TensorList{pooled.detach(), adaptive.detach(), looked_up.detach(), gathered.detach(),
                      x.grad(), table.grad(), rows.grad()};
  };
  const TensorList on_gpu = run(testing::gpu_device()), on_cpu = run(Device::cpu());
  const char* names[] = {"avg_pool2d", "adaptive_avg_pool2d", "embedding", "gather",
                         "pooling input gradient", "embedding gradient", "gather gradient"};
  for (int k = 0; k < 7; ++k) expect_close(on_gpu[k], on_cpu[k], tol() * 2, names[k]);
}

// An embedding's gradient adds many rows into one: summed in float and
// rounded once, as on the CPU. (Rounded at each add, a bfloat16 sum of ones
// stops at 256, a float16 one at 2048.)
TEST_P(Cuda16Bit, ManyAddsIntoOneElementRoundOnce) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  auto run = [&](Device device) {
    Tensor table = zeros({4, 3}, {.dtype = dtype, .device = device}).requires_grad_(true);
    Tensor rows = zeros({2, 5}, {.dtype = dtype, .device = device}).requires_grad_(true);
    F::embedding(zeros({3000}, {.dtype = kInt64, .device = device}), table).sum().backward();  // index_add
    gather(rows, 1, zeros({2, 3000}, {.dtype = kInt64, .device = device})).sum().backward();   // scatter_add
    return std::make_pair(table.grad(), rows.grad());
  };
  const auto [table_gpu, rows_gpu] = run(testing::gpu_device());
  const auto [table_cpu, rows_cpu] = run(Device::cpu());
  // 3000 rounded once: float16 holds it, bfloat16 (8 significant bits) rounds it to 3008.
  EXPECT_EQ(values(table_cpu)[0], dtype == kBFloat16 ? 3008 : 3000);
  expect_equal(table_gpu, table_cpu, "embedding gradient (index_add)");
  expect_equal(rows_gpu, rows_cpu, "gather gradient (scatter_add)");
}

TEST_P(Cuda16Bit, ArangeRoundsAsTheCpu) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  expect_equal(arange(-3, 3000, 7.5, {.dtype = dtype, .device = testing::gpu_device()}),
               arange(-3, 3000, 7.5, {.dtype = dtype}), "arange");
}

TEST_P(Cuda16Bit, MatmulMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  Tensor a = rand({3, 40, 64}, 6), b = rand({64, 24}, 7);
  // Float sums (cuBLAS may not reduce in 16 bits) rounded once: an ulp apart.
  // Sums of 64 products rounded at each step would be ~10 ulps off.
  expect_close(matmul(gpu(a), gpu(b)), matmul(a, b), tol(), "batched, broadcast");
  expect_close(matmul(gpu(a), gpu(b).t().contiguous().t()), matmul(a, b), tol(), "transposed operand");
}

TEST_P(Cuda16Bit, ConvolutionPoolingAndTheirGradientsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  for (bool relu : {false, true}) {
    auto run = [&](Device device) {
      Tensor x = rand({4, 3, 10, 10}, 8).to(device).requires_grad_(true);
      Tensor w = rand({6, 3, 3, 3}, 9).to(device).requires_grad_(true);
      Tensor b = rand({6}, 10).to(device).requires_grad_(true);
      const Conv2dParams p{.pad_h = 1, .pad_w = 1};
      Tensor y = F::max_pool2d(relu ? F::conv2d_relu(x, w, b, p) : F::conv2d(x, w, b, p),
                               {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2});
      (y * rand(y.shape(), 11).to(device)).sum().backward();
      return TensorList{y.detach(), x.grad(), w.grad(), b.grad()};
    };
    const TensorList on_gpu = run(testing::gpu_device()), on_cpu = run(Device::cpu());
    const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
    // Float sums rounded once, but the GPU rounds the convolution to 16 bits
    // before adding the bias (conv.cc): where the bias cancels a sum of ~20,
    // that first rounding is up to 4 tol() of the result. (Emulated on the
    // CPU for these inputs: the output an ulp apart, the same max-pool picks.)
    for (int k = 0; k < 4; ++k)
      expect_close(on_gpu[k], on_cpu[k], tol() * 4, std::string(names[k]) + (relu ? " with relu" : ""));
  }
}

// Parameters and optimizer state in 16 bits (pure bf16/fp16 training): each
// element updated in float and rounded once on both devices.
TEST_P(Cuda16Bit, OptimizerStepsOn16BitParametersMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  Backend& cpu = backend_for(DeviceType::CPU);
  Backend& cuda = backend_for(DeviceType::CUDA);
  auto list = [&](uint64_t seed, double scale) {
    TensorList out;
    for (const Shape& shape : {Shape{5000}, Shape{7}, Shape{33, 65}})
      out.push_back((random(shape, kFloat32, seed++) * scale).to(GetParam()));
    return out;
  };
  auto on_gpu = [](const TensorList& l) {
    TensorList out;
    for (const Tensor& t : l) out.push_back(gpu(t));
    return out;
  };
  auto expect_lists = [&](const TensorList& g, const TensorList& c, const std::string& what) {
    for (size_t k = 0; k < c.size(); ++k) expect_close(g[k], c[k], tol(), what + " tensor " + std::to_string(k));
  };
  TensorList w = list(100, 1), g = list(200, 1), m = list(300, 0.1), v = list(400, 0.01);
  for (Tensor& t : v) t = abs(t);
  TensorList w_gpu = on_gpu(w), g_gpu = on_gpu(g), m_gpu = on_gpu(m), v_gpu = on_gpu(v);
  for (int step = 1; step <= 3; ++step) {
    const AdamParams p{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1,
                       .decoupled_weight_decay = true, .step = step};
    cpu.adam_step(w, g, m, v, p);
    cuda.adam_step(w_gpu, g_gpu, m_gpu, v_gpu, p);
  }
  expect_lists(w_gpu, w, "adamw params");
  expect_lists(m_gpu, m, "adamw exp_avg");
  expect_lists(v_gpu, v, "adamw exp_avg_sq");

  TensorList buf = list(500, 1), buf_gpu = on_gpu(buf);
  for (int step = 0; step < 3; ++step) {
    const SgdParams p{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true, .first_step = step == 0};
    cpu.sgd_step(w, g, buf, p);
    cuda.sgd_step(w_gpu, g_gpu, buf_gpu, p);
  }
  expect_lists(w_gpu, w, "sgd params");
  expect_lists(buf_gpu, buf, "sgd momentum");
}

// The demo's CNN, one step under autocast on both devices: the same loss.
TEST_P(Cuda16Bit, AnAutocastTrainingStepMatchesTheCpu) {
  LOOM_REQUIRE_CUDA();
  auto loss_on = [&](Device device) {
    manual_seed(3);
    nn::Sequential net(nn::Conv2d({.in_channels = 1, .out_channels = 8, .kernel_size = 3, .padding = 1}), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Flatten(), nn::Linear(8 * 14 * 14, 10));
    net->to(device);
    Tensor x = random({16, 1, 28, 28}, kFloat32, 12).to(device);
    Tensor y = randint(0, 10, {16}, {.dtype = kInt64}).to(device);
    Tensor loss;
    {
      AutocastGuard autocast(GetParam());
      loss = F::cross_entropy(net->forward(x), y);
    }
    loss.backward();
    return std::make_pair(loss.item(), net->parameters()[0].grad().cpu());
  };
  const auto [gpu_loss, gpu_grad] = loss_on(testing::gpu_device());
  const auto [cpu_loss, cpu_grad] = loss_on(Device::cpu());
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-2 * cpu_loss);
  EXPECT_EQ(gpu_grad.dtype(), kFloat32) << "parameters and their gradients stay float32";
  EXPECT_LE(testing::max_rel_error(gpu_grad, cpu_grad), 5e-2);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Cuda16Bit, ::testing::Values(kBFloat16, kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace loom
