// loom ops against the same work done with raw Eigen in the same binary.
//
//   bazel run -c opt //bench:ops_bench -- --benchmark_format=json
//   python3 bench/ratios.py < out.json     # loom time / Eigen time per op
//
// Pairs are named BM_<op>_loom/<size> and BM_<op>_eigen/<size>. Both sides
// use the same OpenMP threads (Eigen's GEMM is multithreaded by OpenMP).
#include <benchmark/benchmark.h>

#include <Eigen/Core>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <cmath>
#include <memory>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_avx512.h"
#include "tensor/ops.h"

namespace {

using namespace loom;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] = benchmark::Counter(flops_per_iteration * state.iterations(),
                                                benchmark::Counter::kIsRate);
}

void BM_matmul_loom(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}), b = randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(matmul(a, b).raw_data());
  set_flops(state, 2.0 * n * n * n);
}

// Eigen at its best on this CPU: its AVX-512 build where the processor has
// AVX-512 (called directly, as loom's matmul calls it), else this file's AVX2 one.
void BM_matmul_eigen(benchmark::State& state) {
  const int64_t n = state.range(0);
  RowMatrix a = RowMatrix::Random(n, n), b = RowMatrix::Random(n, n), c(n, n);
  const bool avx512 = cpu::avx512_gemm_enabled();
  for (auto _ : state) {
    if (avx512)
      cpu::gemm_avx512(a.data(), n, true, b.data(), n, true, c.data(), n, n, n, n, 1.0f, false);
    else
      c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * n * n * n);
  state.SetLabel(avx512 ? "avx512" : "avx2");
}

// A Linear layer's products, (m x k) by (k x n): layout 0 the forward
// x W^T (the weight (n, k) read transposed), 1 the input gradient dy W, 2
// the weight gradient dy^T x (the left operand read down its columns).
// loom through mm (its packed kernel or Eigen's GEMM, whichever gemm.h
// picks); Eigen's GEMM on the same memory.
struct LinearOperands {
  Tensor left_storage, right_storage;  // contiguous
  bool left_row_major, right_row_major;
  int64_t m, k, n;

  Tensor left() const { return left_row_major ? left_storage : left_storage.t(); }
  Tensor right() const { return right_row_major ? right_storage : right_storage.t(); }
};

LinearOperands linear_operands(const benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2), layout = state.range(3);
  if (layout == 0) return {randn({m, k}), randn({n, k}), true, false, m, k, n};
  if (layout == 1) return {randn({m, k}), randn({k, n}), true, true, m, k, n};
  return {randn({k, m}), randn({k, n}), false, true, m, k, n};
}

void BM_linear_loom(benchmark::State& state) {
  const LinearOperands o = linear_operands(state);
  const Tensor a = o.left(), b = o.right();
  for (auto _ : state) benchmark::DoNotOptimize(mm(a, b).raw_data());
  set_flops(state, 2.0 * o.m * o.k * o.n);
}

// Eigen's GEMM itself (its AVX-512 build where the processor has it), not
// gemm.h, which would pick loom's packed kernel for these shapes.
void BM_linear_eigen(benchmark::State& state) {
  using ColMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  const LinearOperands o = linear_operands(state);
  RowMatrix c(o.m, o.n);
  const float* a = o.left_storage.data_ptr<float>();
  const float* b = o.right_storage.data_ptr<float>();
  const Eigen::Map<const RowMatrix> a_rows(a, o.m, o.k), b_rows(b, o.k, o.n);
  const Eigen::Map<const ColMatrix> a_columns(a, o.m, o.k), b_columns(b, o.k, o.n);
  const bool avx512 = cpu::avx512_gemm_enabled();
  for (auto _ : state) {
    if (avx512)
      cpu::gemm_avx512(a, o.left_storage.size(1), o.left_row_major, b, o.right_storage.size(1), o.right_row_major,
                       c.data(), o.n, o.m, o.n, o.k, 1.0f, false);
    else if (!o.left_row_major)
      c.noalias() = a_columns * b_rows;
    else if (o.right_row_major)
      c.noalias() = a_rows * b_rows;
    else
      c.noalias() = a_rows * b_columns;
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * o.m * o.k * o.n);
  state.SetLabel(avx512 ? "avx512" : "avx2");
}

// The core's float32 peak: 12 independent chains of 8-wide fused
// multiply-adds, enough to keep both FMA pipes of a Zen or Intel core busy.
// What no product can beat on this machine, to measure GEMMs against (a
// 1024^3 GEMM's rate, which train_bench calls its peak, sits below it).
void BM_fma_peak(benchmark::State& state) {
#ifdef __AVX2__
  constexpr int kChains = 12;
  constexpr int64_t kRounds = 1 << 20;
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + 1e-7f * static_cast<float>(i));
  const __m256 scale = _mm256_set1_ps(0.999999f), shift = _mm256_set1_ps(1e-7f);
  for (auto _ : state) {
    for (int64_t r = 0; r < kRounds; ++r) {
#pragma GCC unroll 12
      for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], scale, shift);
    }
    benchmark::DoNotOptimize(acc);
  }
  set_flops(state, 2.0 * 8 * kChains * kRounds);
#else
  state.SkipWithError("built without AVX2");
#endif
}

// c = a + b over n floats: 12 bytes moved per element.
void BM_add_loom(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n}), b = randn({n});
  for (auto _ : state) benchmark::DoNotOptimize((a + b).raw_data());
  state.SetBytesProcessed(state.iterations() * n * 12);
}

void BM_add_eigen(benchmark::State& state) {
  const int64_t n = state.range(0);
  Eigen::ArrayXf a = Eigen::ArrayXf::Random(n), b = Eigen::ArrayXf::Random(n), c(n);
  for (auto _ : state) {
    c = a + b;
    benchmark::DoNotOptimize(c.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}

// A transcendental op, compute-bound rather than memory-bound.
void BM_tanh_loom(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(tanh(a).raw_data());
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void BM_tanh_eigen(benchmark::State& state) {
  const int64_t n = state.range(0);
  Eigen::ArrayXf a = Eigen::ArrayXf::Random(n), c(n);
  for (auto _ : state) {
    c = a.tanh();
    benchmark::DoNotOptimize(c.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

// One AdamW step over n float32 parameters (weight decay 0.1): the fused
// optimizer kernel against the same update as Eigen array expressions.
// 16 bytes read and 12 written per parameter.
void BM_adamw_loom(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor w = randn({n}), g = randn({n}), m = zeros({n}), v = zeros({n});
  AdamParams p;
  p.weight_decay = 0.1;
  p.decoupled_weight_decay = true;
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.adam_step({w}, {g}, {m}, {v}, p);
    benchmark::DoNotOptimize(w.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * n * 28);
}

void BM_adamw_eigen(benchmark::State& state) {
  const int64_t n = state.range(0);
  Eigen::ArrayXf w = Eigen::ArrayXf::Random(n), g = Eigen::ArrayXf::Random(n), m = Eigen::ArrayXf::Zero(n),
                 v = Eigen::ArrayXf::Zero(n);
  const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  const float step_size = lr / (1 - b1), inv_sqrt_bias2 = 1 / std::sqrt(1 - b2);
  for (auto _ : state) {
    w *= 1 - lr * wd;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    w -= step_size * m / (v.sqrt() * inv_sqrt_bias2 + eps);
    benchmark::DoNotOptimize(w.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 28);
}

// GELU's tanh form, forward and backward (the gpt's MLP activation: 2
// layers of 512 tokens by 512), as training runs it: the forward writes
// gelu(x) and gelu'(x) in one pass, the backward multiplies dy by gelu'(x);
// against the same arithmetic in Eigen array expressions, with Eigen's
// vectorised exp and the logistic s computed once for the backward.
void BM_gelu_loom(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = randn({n}), dy = randn({n}), y = empty({n}), dydx = empty({n}), dx = empty({n});
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.unary_with_derivative(UnaryOp::GeluTanh, x, y, dydx);
    cpu.binary(BinaryOp::Mul, dy, dydx, dx, 1);
    benchmark::DoNotOptimize(dx.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 6);  // x, y, dydx; dy, dydx, dx
}

void BM_gelu_eigen(benchmark::State& state) {
  const int64_t n = state.range(0);
  const float c = 0.7978845608f, cubic = 0.044715f;
  Eigen::ArrayXf x = Eigen::ArrayXf::Random(n), dy = Eigen::ArrayXf::Random(n), y(n), s(n), dx(n);
  for (auto _ : state) {
    y = x / (1.0f + (-2 * c * (x + cubic * x.cube())).exp());
    s = 1.0f / (1.0f + (-2 * c * (x + cubic * x.cube())).exp());
    dx = dy * (s + 2 * c * x * (1.0f + 3 * cubic * x.square()) * s * (1.0f - s));
    benchmark::DoNotOptimize(dx.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4 * 5);
}

// The fused causal attention's forward and backward (the backend's
// kernels) over (batch, heads, T, head dim) float32: the gpt's and
// gpt_large's shapes on the CPU. FLOP/s counts the products a kernel that
// skipped every masked score would do: 2 in the forward, 5 in the backward
// (the scores recomputed, dv, dP, dq, dk), each 2 T^2 D / 2. The tensors
// lie as in the attention layers: q, k and v (and dq, dk, dv) the thirds of
// one projection's (B, T, 3, H, D) rows, out and dout (B, T, H, D).
void BM_attention_loom(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), t = state.range(2), d = state.range(3);
  auto heads_of = [](const Tensor& rows) { return rows.transpose(1, 2); };  // (B, T, H, D) -> (B, H, T, D)
  const Tensor qkv = randn({b, t, 3, h, d}), grads = empty({b, t, 3, h, d});
  Tensor q = heads_of(qkv.select(2, 0)), k = heads_of(qkv.select(2, 1)), v = heads_of(qkv.select(2, 2));
  Tensor dq = heads_of(grads.select(2, 0)), dk = heads_of(grads.select(2, 1)), dv = heads_of(grads.select(2, 2));
  Tensor out = heads_of(empty({b, t, h, d})), dout = heads_of(randn({b, t, h, d})), lse = empty({b, h, t});
  const AttentionParams p{.scale = 1 / std::sqrt(static_cast<double>(d)), .causal = true};
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.attention(q, k, v, p, out, lse);
    cpu.attention_backward(q, k, v, out, dout, lse, p, dq, dk, dv);
    benchmark::DoNotOptimize(dq.raw_data());
  }
  set_flops(state, 7.0 * b * h * t * t * d);
}

// A language model's loss over (tokens, vocabulary) logits: the backend's
// log-softmax forward and backward (the gpt's 512 x 65, gpt_large's 2048 x 65).
void BM_log_softmax_loom(benchmark::State& state) {
  const int64_t rows = state.range(0), vocab = state.range(1);
  const Tensor logits = randn({rows, vocab}), dy = randn({rows, vocab}), y = empty({rows, vocab}),
               dx = empty({rows, vocab});
  const SoftmaxParams p{.log = true};
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.softmax(logits, 1, p, y);
    cpu.softmax_backward(y, dy, 1, p, dx);
    benchmark::DoNotOptimize(dx.raw_data());
  }
}

// One LSTM step's pointwise part, forward and backward, over (batch,
// hidden) float32 rows (the lstm workload's cell: 64 x 128, called 128
// times a training step): the backend's fused cell kernels.
void BM_lstm_cell_loom(benchmark::State& state) {
  const int64_t batch = state.range(0), hidden = state.range(1);
  const Tensor input_gates = randn({batch, 4 * hidden}) * 1.5, hidden_gates = randn({batch, 4 * hidden}) * 1.5;
  const Tensor c_prev = randn({batch, hidden}), dh = randn({batch, hidden}), dc = randn({batch, hidden});
  Tensor h = empty({batch, hidden}), c = empty({batch, hidden}), activations = empty({batch, 4 * hidden});
  Tensor dgates = empty({batch, 4 * hidden}), dc_prev = empty({batch, hidden});
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.lstm_cell(input_gates, hidden_gates, c_prev, h, c, activations);
    cpu.lstm_cell_backward(dh, dc, activations, c_prev, c, dgates, dc_prev);
    benchmark::DoNotOptimize(dgates.raw_data());
  }
}

// Layer norm's forward and backward over (rows, cols) float32 rows, with a
// weight and a bias: the backend's kernels against the same arithmetic as
// Eigen row-wise expressions (xhat kept between the passes, the weight and
// bias gradients summed a row at a time).
void BM_layer_norm_loom(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  Tensor x = randn({rows, cols}), dy = randn({rows, cols}), w = randn({cols}), b = randn({cols});
  Tensor y = empty({rows, cols}), mean = empty({rows}), rstd = empty({rows});
  Tensor dx = empty({rows, cols}), dw = empty({cols}), db = empty({cols});
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.layer_norm(x, w, b, 1e-5, y, mean, rstd);
    cpu.layer_norm_backward(dy, x, w, mean, rstd, dx, dw, db);
    benchmark::DoNotOptimize(dx.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 4 * 5);  // x, y; dy, x, dx
}

void BM_layer_norm_eigen(benchmark::State& state) {
  using RowArray = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t rows = state.range(0), cols = state.range(1);
  RowArray x = RowArray::Random(rows, cols), dy = RowArray::Random(rows, cols), y(rows, cols), xhat(rows, cols),
           g(rows, cols), dx(rows, cols);
  Eigen::Array<float, 1, Eigen::Dynamic> w = Eigen::Array<float, 1, Eigen::Dynamic>::Random(cols), b = w, dw(cols),
                                         db(cols);
  Eigen::ArrayXf mean(rows), rstd(rows);
  for (auto _ : state) {
    mean = x.rowwise().mean();
    xhat = x.colwise() - mean;
    rstd = (xhat.square().rowwise().mean() + 1e-5f).rsqrt();
    xhat.colwise() *= rstd;
    y = (xhat.rowwise() * w).rowwise() + b;
    // Column sums a row at a time: Eigen's colwise() sum of a row-major array strides.
    dw.setZero();
    db.setZero();
    for (int64_t r = 0; r < rows; ++r) {
      dw += dy.row(r) * xhat.row(r);
      db += dy.row(r);
    }
    g = dy.rowwise() * w;
    const Eigen::ArrayXf g_mean = g.rowwise().mean(), gx_mean = (g * xhat).rowwise().mean();
    dx = ((g.colwise() - g_mean) - xhat.colwise() * gx_mean).colwise() * rstd;
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 4 * 5);
}

// Column sums of a (rows, cols) float32 matrix in double accumulators (a
// Linear's bias gradient): loom's reduction over the leading dim against Eigen
// adding a row at a time into a double array. 4096 x 512 is an LSTM layer's
// gate gradients (64 steps x batch 64, 4 x 128 gates): 8 MB, from the L3
// cache here (in a training step, from memory).
void BM_column_sums_loom(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1);
  Tensor x = randn({rows, cols}), out = empty({cols});
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.reduce(ReduceOp::Sum, x.view({rows, cols}), out.view({1, cols}));
    benchmark::DoNotOptimize(out.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
}

void BM_column_sums_eigen(benchmark::State& state) {
  using RowArray = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const int64_t rows = state.range(0), cols = state.range(1);
  RowArray x = RowArray::Random(rows, cols);
  Eigen::Array<double, 1, Eigen::Dynamic> acc(cols);
  Eigen::Array<float, 1, Eigen::Dynamic> out(cols);
  for (auto _ : state) {
    acc.setZero();
    for (int64_t r = 0; r < rows; ++r) acc += x.row(r).cast<double>();
    out = acc.cast<float>();
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * cols * 4);
}

// 2x2 max pooling with stride 2 over float32 planes, with the indices a
// training step keeps: the cnn's two poolings (batch 256: 32 planes of 28 x 28,
// 64 of 14 x 14). No Eigen counterpart; compare builds (the vectorised row
// kernel is tensor/cpu/max_pool_2x2.h).
void BM_max_pool_2x2_loom(benchmark::State& state) {
  const int64_t planes = state.range(0), side = state.range(1);
  Tensor x = randn({planes, 1, side, side}), y = empty({planes, 1, side / 2, side / 2});
  Tensor idx = empty({planes, 1, side / 2, side / 2}, {.dtype = kInt64});
  const Pool2dParams p{.kernel_h = 2, .kernel_w = 2, .stride_h = 2, .stride_w = 2};
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    cpu.max_pool2d(x, p, y, idx);
    benchmark::DoNotOptimize(y.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * planes * side * side * 4);
}

// Convolutions at batch 256 (3x3, padding 1, bias, the ReLU fused): layers
// 1 and 2 are the cnn's (1 -> 32 channels on 28 x 28, 32 -> 64 on 14 x 14),
// layer 0 an RGB image net's first (3 -> 32 channels on 32 x 32, CIFAR's
// size). Pass 0 is the forward, 1 the weight and bias gradients, 2 the
// input gradient (a first layer's is never needed). No Eigen counterpart;
// compare builds. FLOP/s counts the product's multiply-adds twice.
void BM_conv_loom(benchmark::State& state) {
  const int64_t layer = state.range(0), pass = state.range(1);
  const int64_t batch = 256, in = layer == 0 ? 3 : layer == 1 ? 1 : 32, out = layer == 2 ? 64 : 32;
  const int64_t side = layer == 0 ? 32 : layer == 1 ? 28 : 14;
  Tensor x = randn({batch, in, side, side}), w = randn({out, in, 3, 3}), bias = randn({out});
  Tensor y = empty({batch, out, side, side}), dy = randn({batch, out, side, side});
  Tensor dx = empty({batch, in, side, side}), dw = empty({out, in, 3, 3}), dbias = empty({out});
  const Conv2dParams p{.pad_h = 1, .pad_w = 1, .relu = true};
  Backend& cpu = backend_for(Device::cpu());
  cpu.conv2d(x, w, bias, p, y);  // the ReLU output the backward passes mask dy with
  for (auto _ : state) {
    if (pass == 0) cpu.conv2d(x, w, bias, p, y);
    if (pass == 1) cpu.conv2d_backward_weight(dy, y, x, p, dw, dbias);
    if (pass == 2) cpu.conv2d_backward_input(dy, y, w, p, dx);
    benchmark::DoNotOptimize(y.raw_data());
  }
  set_flops(state, 2.0 * batch * out * side * side * in * 9);
}

// An LSTM's recurrence products: 64 steps of h (rows x 128) @ W^T, W of
// (512, 128), and of the backward's dgates (rows x 512) @ W. loom prepares
// the product once (packing W on CPUs without AVX-512); Eigen's product,
// as loom's matmul calls it, packs both operands at every step.
constexpr int64_t kSteps = 64, kHidden = 128;

void BM_recurrence_loom(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const bool backward = state.range(1) != 0;
  const int64_t k = backward ? 4 * kHidden : kHidden, n = backward ? kHidden : 4 * kHidden;
  Tensor w = randn({4 * kHidden, kHidden}), a = randn({kSteps, rows, k}), c = empty({rows, n});
  Backend& cpu = backend_for(Device::cpu());
  for (auto _ : state) {
    const std::unique_ptr<Backend::PreparedProduct> by_w = cpu.prepare_product(backward ? w : w.t());
    for (int64_t t = 0; t < kSteps; ++t) by_w->run(a.select(0, t), c);
    benchmark::DoNotOptimize(c.raw_data());
  }
  set_flops(state, 2.0 * kSteps * rows * k * n);
}

void BM_recurrence_eigen(benchmark::State& state) {
  using ColMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  const int64_t rows = state.range(0);
  const bool backward = state.range(1) != 0;
  const int64_t k = backward ? 4 * kHidden : kHidden, n = backward ? kHidden : 4 * kHidden;
  RowMatrix w = RowMatrix::Random(4 * kHidden, kHidden), c(rows, n);
  std::vector<RowMatrix> a(kSteps, RowMatrix::Random(rows, k));
  const Eigen::Map<const ColMatrix> w_t(w.data(), kHidden, 4 * kHidden);  // W^T, read in place
  for (auto _ : state) {
    for (int64_t t = 0; t < kSteps; ++t) {
      if (backward)
        c.noalias() = a[t] * w;
      else
        c.noalias() = a[t] * w_t;
    }
    benchmark::DoNotOptimize(c.data());
  }
  set_flops(state, 2.0 * kSteps * rows * k * n);
}

BENCHMARK(BM_fma_peak)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matmul_loom)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_matmul_eigen)->Arg(256)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
// The Linear layers' products (m, k, n, layout) of the gpt (512 tokens,
// width 128, vocabulary 65), of gpt_large (2048 tokens, width 256) and the
// lstm's input projection (4096 rows, 64 inputs, 512 gates).
#define LINEAR_SHAPES                                                                                               \
  Args({512, 128, 384, 0})->Args({512, 128, 128, 0})->Args({512, 128, 512, 0})->Args({512, 512, 128, 0})           \
      ->Args({512, 128, 65, 0})->Args({512, 384, 128, 1})->Args({512, 128, 128, 1})->Args({512, 512, 128, 1})      \
      ->Args({512, 128, 512, 1})->Args({512, 65, 128, 1})->Args({384, 512, 128, 2})->Args({128, 512, 128, 2})      \
      ->Args({512, 512, 128, 2})->Args({128, 512, 512, 2})->Args({65, 512, 128, 2})->Args({2048, 256, 768, 0})     \
      ->Args({2048, 1024, 256, 0})->Args({2048, 768, 256, 1})->Args({2048, 256, 1024, 1})                           \
      ->Args({768, 2048, 256, 2})->Args({4096, 64, 512, 0})->Args({4096, 512, 64, 1})->Args({512, 4096, 64, 2})     \
      ->Unit(benchmark::kMicrosecond)                                                                               \
      ->UseRealTime()
BENCHMARK(BM_linear_loom)->LINEAR_SHAPES;
BENCHMARK(BM_linear_eigen)->LINEAR_SHAPES;
// {rows: the batch on one thread, or a half on each of two; 0 forward, 1 backward}
BENCHMARK(BM_recurrence_loom)->ArgsProduct({{64, 32}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_recurrence_eigen)->ArgsProduct({{64, 32}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_add_loom)->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_add_eigen)->Arg(1 << 24)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tanh_loom)->Arg(1 << 22)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_tanh_eigen)->Arg(1 << 22)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_adamw_loom)->Arg(1 << 19)->Arg(1 << 22)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_adamw_eigen)->Arg(1 << 19)->Arg(1 << 22)->Unit(benchmark::kMillisecond)->UseRealTime();
// The CPU gpt's rows (batch 8 x 64 tokens of width 128) and gpt_large's (16 x 128 of 256).
BENCHMARK(BM_gelu_loom)->Arg(1 << 18)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_gelu_eigen)->Arg(1 << 18)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_attention_loom)->Args({8, 4, 64, 32})->Args({16, 4, 128, 64})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_log_softmax_loom)->Args({512, 65})->Args({2048, 65})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_lstm_cell_loom)->Args({64, 128})->Args({64, 37})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_layer_norm_loom)->Args({512, 128})->Args({2048, 256})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_layer_norm_eigen)->Args({512, 128})->Args({2048, 256})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_conv_loom)->Args({0, 0})->Args({0, 1})->Args({1, 0})->Args({1, 1})->Args({2, 0})->Args({2, 1})->Args({2, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_max_pool_2x2_loom)->Args({256 * 32, 28})->Args({256 * 64, 14})->Unit(benchmark::kMillisecond)->UseRealTime();
// An LSTM layer's gate gradients, and gpt_large's MLP bias gradient (2048 x 1024).
BENCHMARK(BM_column_sums_loom)->Args({4096, 512})->Args({2048, 1024})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_column_sums_eigen)->Args({4096, 512})->Args({2048, 1024})->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
