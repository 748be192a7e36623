// float8 on the GPU (cuBLASLt's FP8 products on Hopper) against the CPU's
// simulation of the same: the cast kernel writes the CPU's bytes, products
// by permutation matrices are exact on both, and the three products of a
// Linear layer's step (several tiles each) agree with the CPU's and with a
// float64 reference of the same codes. A float8 training step never waits
// for the host.
//
// Tolerances. A product's codes and scales are the same on both devices (the
// casts are compared byte for byte), so the results differ only in how
// float32 sums are taken. The CPU adds in float32 (2^-24 per addition). The
// tensor cores' FP8 accumulation keeps fewer bits inside an instruction
// (about 14, as DeepSeek-V3's report measured on Hopper), with cuBLASLt
// moving the partial sums to float32 registers as it goes along K (fast
// accumulation is off). So each element must lie within 2^-7 of the sum of
// its products' magnitudes (a bound 14-bit sums stay inside for chunks of
// up to 128 products) plus one rounding of the output; and, over the whole
// matrix, the GPU and the CPU must agree to 2^-5 relative (RMS), which a
// layout error (a transposed operand, a wrong leading dimension, a scale
// applied twice or to the wrong operand) exceeds many times over. Exact
// products (one term per element) must agree bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tensor/autocast.h"
#include "tensor/float8.h"
#include "tensor/host_waits.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tensor/float8_reference.h"

namespace loom {
namespace {

using testing::codes_of;
using testing::gpu;
constexpr Float8Format kE4M3 = Float8Format::kE4M3, kE5M2 = Float8Format::kE5M2;
const double kGpuAccumulation = std::ldexp(1.0, -7);
const double kGpuAgreement = std::ldexp(1.0, -5);

Tensor random_matrix(int64_t rows, int64_t cols, DType dtype, uint64_t seed, double spread = 1) {
  Generator g(seed);
  return (randn({rows, cols}, {}, &g) * spread).to(dtype);
}

// ||a - b|| / ||b|| over all elements, both moved to the CPU in float64.
double relative_rms(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(Device::cpu()).to(kFloat64), y = b.to(Device::cpu()).to(kFloat64);
  return std::sqrt((x - y).square().sum().item() / y.square().sum().item());
}

// A cast's codes, both copies, and its scale, on the GPU and the CPU.
void expect_same_cast(const Tensor& x, Float8Format format, const std::string& what) {
  const Float8Cast on_gpu = float8_cast(gpu(x), format, true), on_cpu = float8_cast(x, format, true);
  EXPECT_TRUE(on_gpu.matrix.bits.device().is_cuda()) << what;
  EXPECT_TRUE(on_gpu.matrix.inv_scale.device().is_cuda()) << what;
  EXPECT_EQ(codes_of(on_gpu.matrix.bits), codes_of(on_cpu.matrix.bits)) << what;
  EXPECT_EQ(codes_of(on_gpu.transposed.bits), codes_of(on_cpu.transposed.bits)) << what << " (transposed)";
  EXPECT_EQ(on_gpu.matrix.inv_scale.item<float>(), on_cpu.matrix.inv_scale.item<float>()) << what;
}

TEST(CudaFloat8, CastsWriteTheCpusBytes) {
  LOOM_REQUIRE_CUDA();
  // Tiles of 32 x 32: shapes with partial tiles, one element, and many tiles.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {100, 70}, {33, 31}, {256, 1152}, {1152, 384}};
  for (const auto& [rows, cols] : shapes)
    for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64})
      for (Float8Format format : {kE4M3, kE5M2})
        expect_same_cast(random_matrix(rows, cols, dtype, rows * cols, 3), format,
                         std::to_string(rows) + " x " + std::to_string(cols) + " " + dtype_name(dtype) +
                             (format == kE4M3 ? " e4m3" : " e5m2"));
  expect_same_cast(zeros({16, 16}), kE4M3, "zeros");
}

// With the format's largest value in the matrix the scale is exactly 1, so
// the kernel encodes the values themselves: every bfloat16 value in range
// (all exponents, subnormals, the ties of bfloat16's 8 bits to float8's 3
// or 2), and a million random floats, byte for byte as the CPU does.
TEST(CudaFloat8, EncodingOnTheDeviceIsTheHostsForEveryBFloat16AndRandomFloats) {
  LOOM_REQUIRE_CUDA();
  for (Float8Format format : {kE4M3, kE5M2}) {
    const float largest = float8::largest(format);
    std::vector<float> values{largest};
    for (uint32_t high = 0; high < 65536; ++high) {
      const float v = float8::float_of(high << 16);
      if (std::fabs(v) <= largest) values.push_back(v);  // NaN and infinities fail the test
    }
    std::mt19937 rng(17);
    std::uniform_real_distribution<float> uniform(-largest, largest);
    std::uniform_int_distribution<int> exponent(-30, 0);
    for (int i = 0; i < 1000000; ++i) values.push_back(std::ldexp(uniform(rng), exponent(rng)));
    values.resize(values.size() / 16 * 16);
    const Tensor x = from_vector(values, {static_cast<int64_t>(values.size()) / 16, 16});
    const Float8Cast on_gpu = float8_cast(gpu(x), format, false);
    ASSERT_EQ(on_gpu.matrix.inv_scale.item<float>(), 1.0f);
    const std::vector<uint8_t> codes = codes_of(on_gpu.matrix.bits);
    int64_t differ = 0;
    for (size_t i = 0; i < values.size(); ++i)
      if (codes[i] != float8::encode(values[i], format) && differ++ < 5)
        ADD_FAILURE() << "value " << values[i] << ": the GPU wrote " << int(codes[i]) << ", the CPU "
                      << int(float8::encode(values[i], format));
    EXPECT_EQ(differ, 0) << values.size() << " values";
  }
}

// A (N, N) permutation matrix with scale 1: row j has 1 at column perm[j].
Float8Matrix permutation(int64_t n, Float8Format format) {
  std::vector<int64_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.begin() + n / 3);
  std::rotate(perm.begin() + n / 3, perm.begin() + n / 2, perm.end());
  std::vector<uint8_t> codes(n * n, 0);
  for (int64_t j = 0; j < n; ++j) codes[j * n + perm[j]] = float8::encode(1.0f, format);
  return {from_vector<uint8_t>(codes, {n, n}), scalar_tensor(1.0), format};
}

// Random codes with scale 1 (finite ones: NaN codes would make NaN products).
Float8Matrix random_codes(int64_t rows, int64_t cols, Float8Format format, uint64_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> codes(rows * cols);
  for (uint8_t& c : codes)
    do c = static_cast<uint8_t>(rng()); while (!std::isfinite(float8::decode(c, format)));
  return {from_vector<uint8_t>(codes, {rows, cols}), scalar_tensor(1.0), format};
}

Float8Matrix on_gpu(const Float8Matrix& m) { return {gpu(m.bits), gpu(m.inv_scale), m.format}; }

// One term per element: exact on both devices, so a layout or scale mistake
// shows as a wrong element, not as a tolerance question.
TEST(CudaFloat8, ProductsByPermutationsAreExactAndTheCpus) {
  LOOM_REQUIRE_CUDA();
  const int64_t m = 64, k = 160;
  for (Float8Format a_format : {kE4M3, kE5M2})
    for (Float8Format p_format : {kE4M3, kE5M2}) {
      if (a_format == kE5M2 && p_format == kE5M2) continue;  // refused (no such kernel)
      const Float8Matrix a = random_codes(m, k, a_format, 3), p = permutation(k, p_format);
      for (DType out : {kFloat32, kBFloat16, kFloat16}) {
        const Tensor bias = random_matrix(1, k, out, 4).reshape({k});
        const std::string what = std::string(dtype_name(out)) + (a_format == kE4M3 ? " e4m3" : " e5m2") + " @ " +
                                 (p_format == kE4M3 ? "e4m3" : "e5m2");
        testing::expect_equal(float8_scaled_mm(on_gpu(a), on_gpu(p), gpu(bias), out).cpu(),
                              float8_scaled_mm(a, p, bias, out), what + " a p^T + bias");
        testing::expect_equal(float8_scaled_mm(on_gpu(p), on_gpu(a), Tensor(), out).cpu(),
                              float8_scaled_mm(p, a, Tensor(), out), what + " p a^T");
      }
    }
}

// The three products of a Linear layer's step, as float8_linear runs them:
// x (M, K), W (N, K), dy (M, N) with M = 256, N = 384, K = 1152.
TEST(CudaFloat8, TheThreeProductsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  const int64_t m = 256, n = 384, k = 1152;
  const Tensor x = random_matrix(m, k, kBFloat16, 1, 2), w = random_matrix(n, k, kFloat32, 2, 0.02);
  const Tensor dy = random_matrix(m, n, kBFloat16, 3, 1e-4), bias = random_matrix(1, n, kFloat32, 4).reshape({n});
  struct Operand {
    const Tensor* source;
    Float8Format format;
    bool transposed;  // which copy of the cast the product reads
  };
  struct Product {
    const char* name;  // also the key of the RMS difference in the test's XML
    Operand a, b;
    DType out;
    bool with_bias;
  };
  const std::vector<Product> products = {
      {"forward_bf16", {&x, kE4M3, false}, {&w, kE4M3, false}, kBFloat16, true},  // x W^T + b
      {"forward_fp32", {&x, kE4M3, false}, {&w, kE4M3, false}, kFloat32, true},
      {"grad_input", {&dy, kE5M2, false}, {&w, kE4M3, true}, kBFloat16, false},  // dy W
      {"grad_weight", {&dy, kE5M2, true}, {&x, kE4M3, true}, kFloat32, false},   // dy^T x
  };
  for (const Product& p : products) {
    // Each operand cast on both devices; the product reads the same codes on both.
    auto cast = [](const Operand& o, bool on_gpu) {
      const Float8Cast c = float8_cast(on_gpu ? gpu(*o.source) : *o.source, o.format, true);
      return o.transposed ? c.transposed : c.matrix;
    };
    const Float8Matrix ag = cast(p.a, true), ac = cast(p.a, false), bg = cast(p.b, true), bc = cast(p.b, false);
    ASSERT_EQ(codes_of(ag.bits), codes_of(ac.bits)) << p.name;
    ASSERT_EQ(codes_of(bg.bits), codes_of(bc.bits)) << p.name;
    const Tensor b = p.with_bias ? bias.to(p.out) : Tensor();
    const Tensor y_gpu = float8_scaled_mm(ag, bg, p.with_bias ? gpu(b) : Tensor(), p.out);
    const Tensor y_cpu = float8_scaled_mm(ac, bc, b, p.out);
    ASSERT_TRUE(y_gpu.device().is_cuda()) << p.name;
    ASSERT_EQ(y_gpu.shape(), y_cpu.shape()) << p.name;
    ASSERT_EQ(y_gpu.dtype(), p.out) << p.name;
    const testing::ProductReference ref = testing::float8_product_reference(ac, bc, b);
    const int64_t terms = ac.bits.size(1);
    testing::expect_float8_product(y_cpu, ref, 2.0 * terms * std::ldexp(1.0, -24), std::string(p.name) + " (CPU)");
    testing::expect_float8_product(y_gpu, ref, kGpuAccumulation, std::string(p.name) + " (GPU)");
    const double rms = relative_rms(y_gpu, y_cpu);
    EXPECT_LE(rms, kGpuAgreement) << p.name;
    RecordProperty(p.name, std::to_string(rms));
  }
}

TEST(CudaFloat8, Float8LinearMatchesTheCpuForwardAndBackward) {
  LOOM_REQUIRE_CUDA();
  Tensor x = random_matrix(256, 1152, kFloat32, 5).reshape({8, 32, 1152});
  Tensor w = random_matrix(384, 1152, kFloat32, 6, 0.02), b = random_matrix(1, 384, kFloat32, 7).reshape({384});
  const Tensor dy = random_matrix(256, 384, kBFloat16, 8, 1e-3).reshape({8, 32, 384});
  auto run = [&](Device device) {
    Tensor xl = x.to(device).detach().requires_grad_(), wl = w.to(device).detach().requires_grad_();
    Tensor bl = b.to(device).detach().requires_grad_();
    Tensor y;
    {
      AutocastGuard autocast(kBFloat16);
      y = nn::functional::float8_linear(xl, wl, bl);
    }
    y.backward(dy.to(device));
    return TensorList{y, xl.grad(), wl.grad(), bl.grad()};
  };
  const TensorList on_gpu = run(testing::gpu_device()), on_cpu = run(Device::cpu());
  const char* names[] = {"y", "dx", "dW", "db"};
  const DType dtypes[] = {kBFloat16, kFloat32, kFloat32, kFloat32};
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(on_gpu[i].device().is_cuda()) << names[i];
    EXPECT_EQ(on_gpu[i].dtype(), dtypes[i]) << names[i];
    EXPECT_EQ(on_gpu[i].shape(), on_cpu[i].shape()) << names[i];
    EXPECT_LE(relative_rms(on_gpu[i], on_cpu[i]), kGpuAgreement) << names[i];
  }
}

// A model's step in float8 (its Linear layers converted, the rest under
// bfloat16 autocast, AdamW) waits for the GPU nowhere, so that it could be
// captured into a CUDA graph; and its loss falls.
TEST(CudaFloat8, ATrainingStepNeverWaitsForTheHost) {
  LOOM_REQUIRE_CUDA();
  manual_seed(21);
  nn::Sequential model(nn::Linear(64, 256), nn::GELU(), nn::Linear(256, 256), nn::GELU(), nn::Linear(256, 64));
  model->to(testing::gpu_device());
  ASSERT_EQ(nn::convert_to_float8_training(*model).size(), 3u);
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  const Tensor x = gpu(random_matrix(128, 64, kFloat32, 22)), target = gpu(random_matrix(128, 64, kFloat32, 23));
  auto step = [&] {
    Tensor loss;
    {
      AutocastGuard autocast(kBFloat16);
      loss = nn::functional::mse_loss(model->forward(x), target);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss;
  };
  const double first = step().item();
  for (int i = 0; i < 3; ++i) step();  // warm: the allocator has every block
  synchronize(testing::gpu_device());
  const int64_t before = host_waits();
  Tensor loss;
  for (int i = 0; i < 20; ++i) loss = step();
  EXPECT_EQ(host_waits(), before) << "a float8 training step waited for the GPU";
  const double last = loss.item();
  EXPECT_TRUE(std::isfinite(last));
  EXPECT_LT(last, first) << "the loss did not fall";
}

TEST(CudaFloat8, RefusesOperandsOnTwoDevices) {
  LOOM_REQUIRE_CUDA();
  const Tensor x = random_matrix(32, 64, kFloat32, 1), w = random_matrix(32, 64, kFloat32, 2);
  EXPECT_THROW_MSG(nn::functional::float8_linear(x, gpu(w)), "share one device");
  const Float8Cast a = float8_cast(x, kE4M3, false), b = float8_cast(gpu(w), kE4M3, false);
  EXPECT_THROW_MSG(float8_scaled_mm(a.matrix, b.matrix, Tensor(), kBFloat16), "float8_scaled_mm");
  Float8Matrix mixed = b.matrix;
  mixed.inv_scale = a.matrix.inv_scale;  // codes on the GPU, scale on the CPU
  EXPECT_THROW_MSG(float8_scaled_mm(mixed, b.matrix, Tensor(), kBFloat16), "float8_scaled_mm");
}

}  // namespace
}  // namespace loom
