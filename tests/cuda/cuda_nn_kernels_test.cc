// The kernels under nn/ and optim/ — convolution (cuDNN) and its two
// gradients, pooling, layer norm, the LSTM cell, fused Adam/AdamW and SGD steps — called
// through the Backend interface on the GPU and on the CPU with the same
// random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cudnn_benchmark.h"
#include "tensor/precision.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::gpu;
using testing::random;

Backend& cuda() { return backend_for(DeviceType::CUDA); }
Backend& cpu() { return backend_for(DeviceType::CPU); }

double tol(DType dtype) { return dtype == kFloat32 ? 1e-4 : 1e-10; }

// For sums of `terms` products of two U(-2, 2) values, as the weight and bias
// gradients are (n * ho * wo terms: 25088 for the mnist layer). Sums in
// another order differ by about sqrt(K) eps |partial sums|, and the partial
// sums grow as sqrt(K) 4/3: K eps 4/3, 4e-3 in float32 for the mnist layer
// (summed one term after another, its dw is 4e-4 from the CPU's).
double sum_tol(DType dtype, int64_t terms) {
  const double eps = dtype == kFloat32 ? std::numeric_limits<float>::epsilon() : std::numeric_limits<double>::epsilon();
  return std::max(tol(dtype), terms * eps * 4 / 3);
}

struct ConvCase {
  const char* name;
  int64_t n, c, h, w, out, kh, kw;
  Conv2dParams p;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"3x3 same", 2, 3, 9, 11, 4, 3, 3, {}},
      {"3x3 pad 1", 2, 3, 9, 11, 4, 3, 3, {.pad_h = 1, .pad_w = 1}},
      {"stride 2", 3, 4, 12, 10, 5, 3, 3, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}},
      {"1x1", 4, 8, 7, 7, 16, 1, 1, {}},
      {"dilation", 2, 2, 13, 13, 3, 3, 3, {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2}},
      {"groups", 2, 6, 8, 8, 9, 3, 3, {.pad_h = 1, .pad_w = 1, .groups = 3}},
      {"depthwise", 2, 4, 8, 8, 4, 3, 3, {.pad_h = 1, .pad_w = 1, .groups = 4}},
      {"asymmetric", 1, 3, 10, 6, 2, 5, 2, {.stride_h = 1, .stride_w = 2, .pad_h = 2, .pad_w = 0}},
      {"mnist layer", 32, 1, 28, 28, 32, 3, 3, {.pad_h = 1, .pad_w = 1}},
  };
}

class CudaNnKernels : public ::testing::TestWithParam<DType> {};

TEST_P(CudaNnKernels, Conv2dAndItsGradients) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 600;
  // cuDNN's heuristics' algorithms, then the ones its trial runs pick (set_cudnn_benchmark).
  for (bool benchmark : {false, true})
  for (ConvCase c : conv_cases())
    for (bool relu : {false, true}) {  // with and without the fused ReLU
      set_cudnn_benchmark(benchmark);
      c.p.relu = relu;
      const std::string name = c.name + std::string(relu ? " + relu" : "") + (benchmark ? " (benchmark)" : "");
      const int64_t ho = window_output_size(c.h, c.kh, c.p.stride_h, c.p.pad_h, c.p.dilation_h);
      const int64_t wo = window_output_size(c.w, c.kw, c.p.stride_w, c.p.pad_w, c.p.dilation_w);
      Tensor x = random({c.n, c.c, c.h, c.w}, dtype, ++seed);
      Tensor w = random({c.out, c.c / c.p.groups, c.kh, c.kw}, dtype, ++seed);
      Tensor bias = random({c.out}, dtype, ++seed);
      Tensor dy = random({c.n, c.out, ho, wo}, dtype, ++seed);
      Tensor y_cpu = empty(dy.shape(), {.dtype = dtype}), y_gpu = gpu(y_cpu);
      cpu().conv2d(x, w, bias, c.p, y_cpu);
      cuda().conv2d(gpu(x), gpu(w), gpu(bias), c.p, y_gpu);
      expect_close(y_gpu, y_cpu, tol(dtype), "conv2d " + name);
      // The backward's mask comes from the CPU's output on both sides, so
      // that a value near 0 cannot fall on different sides of it.
      const Tensor relu_out = relu ? y_cpu : Tensor();
      const Tensor relu_out_gpu = relu ? gpu(y_cpu) : Tensor();
      Tensor dx_cpu = empty(x.shape(), {.dtype = dtype}), dx_gpu = gpu(full(x.shape(), 7, {.dtype = dtype}));
      cpu().conv2d_backward_input(dy, relu_out, w, c.p, dx_cpu);
      cuda().conv2d_backward_input(gpu(dy), relu_out_gpu, gpu(w), c.p, dx_gpu);
      expect_close(dx_gpu, dx_cpu, tol(dtype), "conv2d_backward_input " + name);
      Tensor dw_cpu = empty(w.shape(), {.dtype = dtype}), dw_gpu = gpu(full(w.shape(), 7, {.dtype = dtype}));
      Tensor db_cpu = empty({c.out}, {.dtype = dtype}), db_gpu = gpu(full({c.out}, 7, {.dtype = dtype}));
      cpu().conv2d_backward_weight(dy, relu_out, x, c.p, dw_cpu, db_cpu);
      cuda().conv2d_backward_weight(gpu(dy), relu_out_gpu, gpu(x), c.p, dw_gpu, db_gpu);
      expect_close(dw_gpu, dw_cpu, sum_tol(dtype, c.n * ho * wo), "conv2d_backward_weight " + name);
      expect_close(db_gpu, db_cpu, sum_tol(dtype, c.n * ho * wo), "conv2d bias gradient " + name);
      set_cudnn_benchmark(false);
    }
}

TEST_P(CudaNnKernels, PoolingForwardAndBackward) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const std::vector<Pool2dParams> params = {
      {.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2},
      {.kernel_h = 3, .kernel_w = 3, .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1},  // overlapping
      {.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 0},
  };
  uint64_t seed = 700;
  for (const Pool2dParams& p : params) {
    Tensor x = random({3, 4, 11, 9}, dtype, ++seed);
    const int64_t ho = window_output_size(11, p.kernel_h, p.stride_h, p.pad_h, 1);
    const int64_t wo = window_output_size(9, p.kernel_w, p.stride_w, p.pad_w, 1);
    Tensor dy = random({3, 4, ho, wo}, dtype, ++seed);
    const std::string what = std::to_string(p.kernel_h) + "x" + std::to_string(p.kernel_w) + " stride " +
                             std::to_string(p.stride_h) + " pad " + std::to_string(p.pad_h);
    Tensor y_cpu = empty(dy.shape(), {.dtype = dtype}), i_cpu = empty(dy.shape(), {.dtype = kInt64});
    Tensor y_gpu = gpu(y_cpu), i_gpu = gpu(i_cpu);
    cpu().max_pool2d(x, p, y_cpu, i_cpu);
    cuda().max_pool2d(gpu(x), p, y_gpu, i_gpu);
    expect_equal(y_gpu, y_cpu, "max_pool2d " + what);
    expect_equal(i_gpu, i_cpu, "max_pool2d indices " + what);
    Tensor dx_cpu = empty(x.shape(), {.dtype = dtype}), dx_gpu = gpu(full(x.shape(), 7, {.dtype = dtype}));
    cpu().max_pool2d_backward(dy, i_cpu, dx_cpu);
    cuda().max_pool2d_backward(gpu(dy), i_gpu, dx_gpu);
    expect_close(dx_gpu, dx_cpu, tol(dtype), "max_pool2d_backward " + what);

    cpu().avg_pool2d(x, p, y_cpu);
    cuda().avg_pool2d(gpu(x), p, y_gpu);
    expect_close(y_gpu, y_cpu, tol(dtype), "avg_pool2d " + what);
    cpu().avg_pool2d_backward(dy, p, dx_cpu);
    cuda().avg_pool2d_backward(gpu(dy), p, dx_gpu);
    expect_close(dx_gpu, dx_cpu, tol(dtype), "avg_pool2d_backward " + what);
  }
  for (const auto& [ho, wo] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 4}, {5, 5}, {11, 9}}) {
    Tensor x = random({2, 3, 11, 9}, dtype, ++seed), dy = random({2, 3, ho, wo}, dtype, ++seed);
    const std::string what = "adaptive to " + std::to_string(ho) + "x" + std::to_string(wo);
    Tensor y_cpu = empty(dy.shape(), {.dtype = dtype}), y_gpu = gpu(y_cpu);
    cpu().adaptive_avg_pool2d(x, y_cpu);
    cuda().adaptive_avg_pool2d(gpu(x), y_gpu);
    expect_close(y_gpu, y_cpu, tol(dtype), what);
    Tensor dx_cpu = empty(x.shape(), {.dtype = dtype}), dx_gpu = gpu(full(x.shape(), 7, {.dtype = dtype}));
    cpu().adaptive_avg_pool2d_backward(dy, dx_cpu);
    cuda().adaptive_avg_pool2d_backward(gpu(dy), dx_gpu);
    expect_close(dx_gpu, dx_cpu, tol(dtype), what + " backward");
  }
}

// NaN in two rows of one window: the first, in row-major order, is the
// maximum on both devices, so the backward sends dy to the same element.
TEST_P(CudaNnKernels, MaxPoolPicksTheFirstNaNOfAWindow) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({1, 1, 4, 4}, dtype, 750);
  {
    NoGradGuard no_grad;
    x.narrow(2, 1, 1).narrow(3, 1, 1).fill_(NAN);  // (1, 1) and (2, 0): rows 1 and 2 of the window at (1, 0)
    x.narrow(2, 2, 1).narrow(3, 0, 1).fill_(NAN);
  }
  const Pool2dParams p{.kernel_h = 2, .kernel_w = 2, .stride_h = 1, .stride_w = 1};
  Tensor y_cpu = empty({1, 1, 3, 3}, {.dtype = dtype}), i_cpu = empty({1, 1, 3, 3}, {.dtype = kInt64});
  Tensor y_gpu = gpu(y_cpu), i_gpu = gpu(i_cpu);
  cpu().max_pool2d(x, p, y_cpu, i_cpu);
  cuda().max_pool2d(gpu(x), p, y_gpu, i_gpu);
  EXPECT_EQ(i_cpu.to_vector<int64_t>()[3], 5) << "the window at (1, 0) picks (1, 1) on the CPU";
  expect_equal(i_gpu, i_cpu, "max_pool2d indices with NaNs");
}

// No rows: the parameter gradients are sums of nothing, 0 on both devices.
TEST_P(CudaNnKernels, LayerNormBackwardOfNoRowsGivesZeroParameterGradients) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = empty({0, 5}, {.dtype = dtype}), w = random({5}, dtype, 760), stats = empty({0}, {.dtype = dtype});
  Tensor dw = gpu(full({5}, 7, {.dtype = dtype})), db = gpu(full({5}, 7, {.dtype = dtype}));
  cuda().layer_norm_backward(gpu(x), gpu(x), gpu(w), gpu(stats), gpu(stats), gpu(x), dw, db);
  expect_equal(dw, zeros({5}, {.dtype = dtype}), "dweight");
  expect_equal(db, zeros({5}, {.dtype = dtype}), "dbias");
}

TEST_P(CudaNnKernels, LayerNormForwardAndBackward) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 800;
  // Widths on both sides of the warp / block switch (1024), rows enough to
  // split the weight-gradient sums over several blocks.
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {7, 33}, {300, 512}, {5, 1500}, {2000, 64}})
    for (bool affine : {true, false}) {
      const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + (affine ? " affine" : "");
      Tensor x = random({rows, cols}, dtype, ++seed, -3, 5), dy = random({rows, cols}, dtype, ++seed);
      Tensor w = affine ? random({cols}, dtype, ++seed) : Tensor(), b = affine ? random({cols}, dtype, ++seed) : Tensor();
      auto on_gpu = [](const Tensor& t) { return t.defined() ? gpu(t) : Tensor(); };
      Tensor y_cpu = empty(x.shape(), {.dtype = dtype}), mean_cpu = empty({rows}, {.dtype = dtype}),
             rstd_cpu = empty({rows}, {.dtype = dtype});
      Tensor y_gpu = gpu(y_cpu), mean_gpu = gpu(mean_cpu), rstd_gpu = gpu(rstd_cpu);
      cpu().layer_norm(x, w, b, 1e-5, y_cpu, mean_cpu, rstd_cpu);
      cuda().layer_norm(gpu(x), on_gpu(w), on_gpu(b), 1e-5, y_gpu, mean_gpu, rstd_gpu);
      expect_close(y_gpu, y_cpu, tol(dtype), "layer_norm " + what);
      expect_close(mean_gpu, mean_cpu, tol(dtype), "layer_norm mean " + what);
      expect_close(rstd_gpu, rstd_cpu, tol(dtype), "layer_norm rstd " + what);

      Tensor dx_cpu = empty(x.shape(), {.dtype = dtype}), dx_gpu = gpu(dx_cpu);
      Tensor dw_cpu = affine ? empty({cols}, {.dtype = dtype}) : Tensor(), db_cpu = affine ? empty({cols}, {.dtype = dtype}) : Tensor();
      Tensor dw_gpu = affine ? gpu(full({cols}, 7, {.dtype = dtype})) : Tensor();
      Tensor db_gpu = affine ? gpu(full({cols}, 7, {.dtype = dtype})) : Tensor();
      cpu().layer_norm_backward(dy, x, w, mean_cpu, rstd_cpu, dx_cpu, dw_cpu, db_cpu);
      cuda().layer_norm_backward(gpu(dy), gpu(x), on_gpu(w), mean_gpu, rstd_gpu, dx_gpu, dw_gpu, db_gpu);
      expect_close(dx_gpu, dx_cpu, tol(dtype), "layer_norm dx " + what);
      if (affine) {
        expect_close(dw_gpu, dw_cpu, dtype == kFloat32 ? 1e-3 : 1e-9, "layer_norm dweight " + what);
        expect_close(db_gpu, db_cpu, dtype == kFloat32 ? 1e-3 : 1e-9, "layer_norm dbias " + what);
      }
    }
}

TEST_P(CudaNnKernels, LstmCellForwardAndBackward) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 900;
  // One unit; a warp's worth; more units than one grid holds per thread.
  for (const auto& [batch, hidden] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 32}, {64, 512}, {4000, 300}}) {
    const std::string what = std::to_string(batch) + "x" + std::to_string(hidden);
    const TensorOptions o{.dtype = dtype};
    Tensor xg = random({batch, 4 * hidden}, dtype, ++seed, -4, 4), hg = random({batch, 4 * hidden}, dtype, ++seed, -4, 4);
    Tensor c_prev = random({batch, hidden}, dtype, ++seed);
    Tensor h_cpu = empty({batch, hidden}, o), c_cpu = empty({batch, hidden}, o), act_cpu = empty({batch, 4 * hidden}, o);
    Tensor h_gpu = gpu(h_cpu), c_gpu = gpu(c_cpu), act_gpu = gpu(act_cpu);
    cpu().lstm_cell(xg, hg, c_prev, h_cpu, c_cpu, act_cpu);
    cuda().lstm_cell(gpu(xg), gpu(hg), gpu(c_prev), h_gpu, c_gpu, act_gpu);
    expect_close(h_gpu, h_cpu, tol(dtype), "lstm_cell h " + what);
    expect_close(c_gpu, c_cpu, tol(dtype), "lstm_cell c " + what);
    expect_close(act_gpu, act_cpu, tol(dtype), "lstm_cell activations " + what);

    Tensor dh = random({batch, hidden}, dtype, ++seed), dc = random({batch, hidden}, dtype, ++seed);
    Tensor dgates_cpu = empty({batch, 4 * hidden}, o), dc_prev_cpu = empty({batch, hidden}, o);
    Tensor dgates_gpu = gpu(dgates_cpu), dc_prev_gpu = gpu(dc_prev_cpu);
    cpu().lstm_cell_backward(dh, dc, act_cpu, c_prev, c_cpu, dgates_cpu, dc_prev_cpu);
    cuda().lstm_cell_backward(gpu(dh), gpu(dc), act_gpu, gpu(c_prev), c_gpu, dgates_gpu, dc_prev_gpu);
    expect_close(dgates_gpu, dgates_cpu, tol(dtype), "lstm_cell dgates " + what);
    expect_close(dc_prev_gpu, dc_prev_cpu, tol(dtype), "lstm_cell dc_prev " + what);
  }
}

// 60 tensors of assorted sizes: more than one launch's worth (56), one
// larger than a block's chunk, and an empty one.
std::vector<Shape> parameter_shapes() {
  std::vector<Shape> shapes;
  for (int i = 0; i < 60; ++i) shapes.push_back(Shape{1 + (i * 37) % 300});
  shapes[3] = Shape{128, 129};
  shapes[10] = Shape{0};
  return shapes;
}

TensorList random_list(const std::vector<Shape>& shapes, DType dtype, uint64_t seed, double low, double high) {
  TensorList out;
  for (const Shape& s : shapes) out.push_back(random(s, dtype, seed++, low, high));
  return out;
}

TensorList to_gpu(const TensorList& list) {
  TensorList out;
  for (const Tensor& t : list) out.push_back(gpu(t));
  return out;
}

void expect_lists_close(const TensorList& got, const TensorList& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], expected[i], tolerance, what + " tensor " + std::to_string(i));
}

TEST_P(CudaNnKernels, AdamAndAdamWStepsOverManyTensors) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const std::vector<Shape> shapes = parameter_shapes();
  for (bool decoupled : {false, true}) {
    TensorList w = random_list(shapes, dtype, 1000, -1, 1), g = random_list(shapes, dtype, 2000, -1, 1);
    TensorList m = random_list(shapes, dtype, 3000, -0.1, 0.1), v = random_list(shapes, dtype, 4000, 0, 0.01);
    TensorList w_gpu = to_gpu(w), g_gpu = to_gpu(g), m_gpu = to_gpu(m), v_gpu = to_gpu(v);
    AdamParams p{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.1,
                 .decoupled_weight_decay = decoupled, .step = 1};
    for (int step = 1; step <= 3; ++step) {
      p.step = step;
      cpu().adam_step(w, g, m, v, p);
      cuda().adam_step(w_gpu, g_gpu, m_gpu, v_gpu, p);
    }
    const std::string what = decoupled ? "adamw" : "adam";
    expect_lists_close(w_gpu, w, tol(dtype), what + " params");
    expect_lists_close(m_gpu, m, tol(dtype), what + " exp_avg");
    expect_lists_close(v_gpu, v, tol(dtype), what + " exp_avg_sq");
  }
}

TEST_P(CudaNnKernels, SgdStepsWithAndWithoutMomentum) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const std::vector<Shape> shapes = parameter_shapes();
  const std::vector<SgdParams> settings = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.1, .nesterov = false},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true},
  };
  for (size_t k = 0; k < settings.size(); ++k) {
    TensorList w = random_list(shapes, dtype, 5000, -1, 1), g = random_list(shapes, dtype, 6000, -1, 1);
    TensorList buf = random_list(shapes, dtype, 7000, -1, 1);
    TensorList w_gpu = to_gpu(w), g_gpu = to_gpu(g), buf_gpu = to_gpu(buf);
    const bool momentum = settings[k].momentum != 0;
    for (int step = 0; step < 3; ++step) {
      SgdParams p = settings[k];
      p.first_step = step == 0;
      cpu().sgd_step(w, g, momentum ? buf : TensorList{}, p);
      cuda().sgd_step(w_gpu, g_gpu, momentum ? buf_gpu : TensorList{}, p);
    }
    expect_lists_close(w_gpu, w, tol(dtype), "sgd setting " + std::to_string(k));
    if (momentum) expect_lists_close(buf_gpu, buf, tol(dtype), "sgd momentum setting " + std::to_string(k));
  }
}

// GradScaler's fused pass: the same unscaled values as the CPU's (one
// multiplication each: equal bit for bit), the flag low while every result is
// finite, raised by one NaN among many tensors, and never lowered.
TEST_P(CudaNnKernels, UnscaleAndCheckFiniteOverManyTensors) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  TensorList g = random_list(parameter_shapes(), dtype, 8000, -1, 1);
  TensorList g_gpu = to_gpu(g);
  Tensor flag = zeros({1}), flag_gpu = gpu(zeros({1}));
  cpu().unscale_and_check_finite(g, 1.0 / 3.0, flag);
  cuda().unscale_and_check_finite(g_gpu, 1.0 / 3.0, flag_gpu);
  expect_lists_close(g_gpu, g, 0, "unscaled gradients");
  expect_equal(flag_gpu, flag, "flag after finite gradients");
  EXPECT_EQ(flag.item(), 0);
  g_gpu.back().narrow(0, g_gpu.back().size(0) - 1, 1).fill_(NAN);  // the last element of the last tensor
  cuda().unscale_and_check_finite(g_gpu, 1.0, flag_gpu);
  EXPECT_EQ(flag_gpu.item(), 1) << "a NaN in the last tensor's last element";
  cuda().unscale_and_check_finite({g_gpu[0]}, 1.0, flag_gpu);
  EXPECT_EQ(flag_gpu.item(), 1) << "the flag is never lowered";
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaNnKernels, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

TEST(CudaConvPrecision, Float32ConvolutionIsExactUnlessTf32IsAllowed) {
  LOOM_REQUIRE_CUDA();
  Tensor x = random({8, 64, 16, 16}, kFloat32, 1), w = random({64, 64, 3, 3}, kFloat32, 2);
  const Conv2dParams p{.pad_h = 1, .pad_w = 1};
  Tensor exact = empty({8, 64, 16, 16}, {.dtype = kFloat64});
  cpu().conv2d(x.to(kFloat64), w.to(kFloat64), Tensor(), p, exact);
  Tensor y = gpu(empty({8, 64, 16, 16}));
  cuda().conv2d(gpu(x), gpu(w), Tensor(), p, y);
  // Sums of 576 products: 5e-5 at worst summed one term after another (as a
  // direct algorithm does); cuDNN may pick Winograd or FFT, several times less
  // exact, hence 1e-3. TF32 keeps 11 significant bits of each input: 3e-2
  // (emulated), more through Winograd or FFT; a wrong result is off by ~1.
  EXPECT_LT(testing::max_rel_error(y.to(kFloat64), exact), 1e-3) << "float32 conv must not use TF32 by default";
  set_allow_tf32(true);
  cuda().conv2d(gpu(x), gpu(w), Tensor(), p, y);
  set_allow_tf32(false);
  EXPECT_LT(testing::max_rel_error(y.to(kFloat64), exact), 1e-1);
}

}  // namespace
}  // namespace loom
