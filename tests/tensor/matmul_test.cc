// Matrix products against a triple loop in double.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>

#include "autograd/engine.h"
#include "autograd/gradcheck.h"
#include "tensor/backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/gemm_avx512.h"
#include "tensor/cpu/packed_gemm.h"
#include "tests/omp_threads.h"
#include "tests/tensor/rounding_probe.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;

// (M, K) @ (K, N) for contiguous copies of a and b.
std::vector<double> naive_mm(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values(a.contiguous()), y = values(b.contiguous());
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) out[i * n + j] += x[i * k + p] * y[p * n + j];
  return out;
}

// The AVX-512 build of the GEMM (on processors that have it) and the AVX2
// one each against the triple loop, in every operand layout, and against
// each other.
TEST(Matmul, Avx512AndAvx2GemmsAgree) {
  cpu::set_avx512_gemm(true);
  if (!cpu::avx512_gemm_enabled()) GTEST_SKIP() << "this CPU has no AVX-512: only the AVX2 GEMM runs";
  Generator gen(8);
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor a = randn({67, 129}, {.dtype = dtype}, &gen), at = randn({129, 67}, {.dtype = dtype}, &gen).t();
    Tensor b = randn({129, 45}, {.dtype = dtype}, &gen), bt = randn({45, 129}, {.dtype = dtype}, &gen).t();
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
    for (const Tensor& x : {a, at})
      for (const Tensor& y : {b, bt}) {
        const std::vector<double> expected = naive_mm(x, y);
        cpu::set_avx512_gemm(false);
        const Tensor avx2 = matmul(x, y);
        cpu::set_avx512_gemm(true);
        const Tensor avx512 = matmul(x, y);
        expect_values(avx2, expected, tol);
        expect_values(avx512, expected, tol);
        EXPECT_LT(testing::max_rel_error(avx512, avx2), tol);
      }
  }
}

TEST(Matmul, AllOperandLayouts) {
  Generator gen(7);
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor a = randn({13, 17}, {.dtype = dtype}, &gen);
    Tensor b = randn({17, 11}, {.dtype = dtype}, &gen);
    Tensor at = randn({17, 13}, {.dtype = dtype}, &gen).t();  // column-major views
    Tensor bt = randn({11, 17}, {.dtype = dtype}, &gen).t();
    Tensor stepped = randn({13, 34}, {.dtype = dtype}, &gen).slice(1, 0, 34, 2);  // no unit stride
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
    expect_values(mm(a, b), naive_mm(a, b), tol);
    expect_values(mm(at, b), naive_mm(at, b), tol);
    expect_values(mm(a, bt), naive_mm(a, bt), tol);
    expect_values(mm(at, bt), naive_mm(at, bt), tol);
    expect_values(mm(stepped, b), naive_mm(stepped, b), tol);
  }
}

TEST(Matmul, BatchedAndBroadcast) {
  Generator gen(8);
  Tensor a = randn({3, 4, 5}, {.dtype = kFloat64}, &gen);
  Tensor b = randn({3, 5, 2}, {.dtype = kFloat64}, &gen);
  Tensor y = bmm(a, b);
  for (int i = 0; i < 3; ++i) expect_values(y.select(0, i), naive_mm(a.select(0, i), b.select(0, i)), 1e-12);
  // (2, 1, 4, 5) @ (3, 5, 2) broadcasts the batch to (2, 3).
  Tensor a4 = randn({2, 1, 4, 5}, {.dtype = kFloat64}, &gen);
  Tensor y4 = matmul(a4, b);
  EXPECT_EQ(y4.shape(), (Shape{2, 3, 4, 2}));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      expect_values(y4.select(0, i).select(0, j), naive_mm(a4.select(0, i).select(0, 0), b.select(0, j)), 1e-12);
  // (B, T, C) @ (C, N): folded into one GEMM.
  Tensor w = randn({5, 6}, {.dtype = kFloat64}, &gen);
  Tensor y3 = matmul(a, w);
  EXPECT_EQ(y3.shape(), (Shape{3, 4, 6}));
  expect_values(y3.select(0, 2), naive_mm(a.select(0, 2), w), 1e-12);
}

TEST(Matmul, VectorCases) {
  Tensor v = from_vector<float>({1, 2, 3});
  Tensor m = arange(0, 6, 1).reshape({3, 2});
  EXPECT_EQ(matmul(v, v).shape(), (Shape{}));
  EXPECT_DOUBLE_EQ(matmul(v, v).item(), 14);
  expect_values(matmul(v, m), {16, 22});
  expect_values(matmul(m.t(), v), {16, 22});
  EXPECT_EQ(matmul(zeros({4, 2, 3}), v).shape(), (Shape{4, 2}));
}

TEST(Matmul, ErrorsNameShapes) {
  EXPECT_THROW_MSG(mm(zeros({2, 3}), zeros({4, 5})), "mm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(matmul(zeros({2, 3}), zeros({2})), "matmul: shapes [2, 3] and [2] cannot be multiplied");
  EXPECT_THROW_MSG(bmm(zeros({2, 3, 4}), zeros({3, 4, 5})), "bmm: shapes [2, 3, 4] and [3, 4, 5] cannot be multiplied");
  EXPECT_THROW_MSG(mm(zeros({2, 2}), zeros({2, 2}, {.dtype = kFloat64})), "mm: expected operands of one dtype");
  EXPECT_THROW_MSG(mm(zeros({2, 2}, {.dtype = kInt64}), zeros({2, 2}, {.dtype = kInt64})),
                   "mm: expected a floating-point tensor, got int64");
  EXPECT_THROW_MSG(mm(zeros({2}), zeros({2, 2})), "mm: expected 2-D tensors");
}

TEST(Matmul, EmptyInnerDimensionGivesZeros) {
  expect_values(mm(zeros({2, 0}), zeros({0, 3})), std::vector<double>(6, 0.0));
  // matmul folds batch dims into rows: no dim may be left to reshape's -1 when sizes are 0.
  Tensor y = matmul(ones({2, 0}), ones({0, 3}));
  EXPECT_EQ(y.shape(), Shape({2, 3}));
  expect_values(y, std::vector<double>(6, 0.0));
  EXPECT_EQ(matmul(ones({4, 2, 0}), ones({0, 3})).shape(), Shape({4, 2, 3}));
  EXPECT_EQ(matmul(ones({4, 2, 0}), ones({4, 0, 3})).shape(), Shape({4, 2, 3}));
  EXPECT_EQ(matmul(ones({0, 2, 5}), ones({5, 3})).shape(), Shape({0, 2, 3}));
  EXPECT_EQ(matmul(ones({0, 2, 5}), ones({1, 5, 3})).shape(), Shape({0, 2, 3}));
  EXPECT_EQ(matmul(ones({3, 0, 5}), ones({3, 5, 0})).shape(), Shape({3, 0, 0}));
  // The gradient of a product with an empty inner dim is empty, and the other operand's is zero.
  Tensor a = ones({2, 0}, {.requires_grad = true}), b = ones({0, 3}, {.requires_grad = true});
  Tensor z = ones({5, 2}, {.requires_grad = true});
  (matmul(a, b).sum() + matmul(z, matmul(a, b)).sum()).backward();
  EXPECT_EQ(a.grad().shape(), Shape({2, 0}));
  EXPECT_EQ(b.grad().shape(), Shape({0, 3}));
  expect_values(z.grad(), std::vector<double>(10, 0.0));
}

// Gradients through transposed operands (a Linear's weight.t()): the same
// values as through contiguous copies (against a triple loop), computed in
// the operand's own layout, so that the transpose's gradient, what reaches
// the leaf, is contiguous and AccumulateGrad keeps it without a copy.
TEST(Matmul, TransposedOperandsGetGradientsInTheirOwnLayout) {
  Generator gen(3);
  Tensor a_leaf = randn({6, 5}, {.dtype = kFloat64, .requires_grad = true}, &gen);
  Tensor w = randn({4, 6}, {.dtype = kFloat64, .requires_grad = true}, &gen);
  Tensor at = a_leaf.t(), wt = w.t();  // (5, 6) and (6, 4), column-major
  Tensor dy = randn({5, 4}, {.dtype = kFloat64}, &gen);
  TensorList views = autograd::grad({mm(at, wt)}, {at, wt}, {dy}, true);
  // d(at) = dy @ wt^T, d(wt) = at^T @ dy.
  expect_values(views[0], naive_mm(dy, wt.detach().t()), 1e-12);
  expect_values(views[1], naive_mm(at.detach().t(), dy), 1e-12);
  EXPECT_EQ(views[0].strides(), at.strides());
  EXPECT_EQ(views[1].strides(), wt.strides());
  TensorList leaves = autograd::grad({mm(at, wt)}, {a_leaf, w}, {dy});
  EXPECT_TRUE(leaves[0].is_contiguous());
  EXPECT_TRUE(leaves[1].is_contiguous());

  // A Linear-shaped product, batch folded: the weight's gradient is (out, in), contiguous.
  Tensor x = randn({2, 3, 6}, {.dtype = kFloat64}, &gen);
  Tensor g = randn({2, 3, 4}, {.dtype = kFloat64}, &gen);
  Tensor dweight = autograd::grad({matmul(x, w.t())}, {w}, {g})[0];
  expect_values(dweight, naive_mm(g.reshape({6, 4}).t(), x.reshape({6, 6})), 1e-12);
  EXPECT_TRUE(dweight.is_contiguous());
}

// addmm against the triple loop plus the bias, in every operand layout: the
// bias row is written first and the GEMM adds its product to it.
TEST(Addmm, AddsTheBiasRowInEveryLayout) {
  Generator gen(11);
  for (DType dtype : {kFloat32, kFloat64}) {
    Tensor a = randn({13, 17}, {.dtype = dtype}, &gen), at = randn({17, 13}, {.dtype = dtype}, &gen).t();
    Tensor b = randn({17, 11}, {.dtype = dtype}, &gen), bt = randn({11, 17}, {.dtype = dtype}, &gen).t();
    Tensor stepped = randn({13, 34}, {.dtype = dtype}, &gen).slice(1, 0, 34, 2);
    Tensor bias = randn({11}, {.dtype = dtype}, &gen);
    Tensor bias_with_step = randn({22}, {.dtype = dtype}, &gen).slice(0, 0, 22, 2);  // not contiguous
    const double tol = dtype == kFloat32 ? 1e-5 : 1e-12;
    for (const Tensor& x : {a, at, stepped})
      for (const Tensor& y : {b, bt})
        for (const Tensor& row : {bias, bias_with_step}) {
          std::vector<double> expected = naive_mm(x, y);
          const std::vector<double> r = values(row);
          for (size_t i = 0; i < expected.size(); ++i) expected[i] += r[i % 11];
          expect_values(addmm(row, x, y), expected, tol);
        }
  }
}

// A bias of another shape broadcasts as in an addition after the product.
TEST(Addmm, OtherBiasShapesBroadcast) {
  Generator gen(12);
  Tensor a = randn({4, 3}, {.dtype = kFloat64}, &gen), b = randn({3, 5}, {.dtype = kFloat64}, &gen);
  for (const Shape& shape : {Shape({4, 1}), Shape({4, 5}), Shape({1, 5}), Shape({})}) {
    Tensor bias = randn(shape, {.dtype = kFloat64}, &gen);
    expect_values(addmm(bias, a, b), values(mm(a, b) + bias), 1e-12);
  }
}

TEST(Addmm, EmptyInnerDimensionGivesTheBias) {
  Tensor bias = from_vector<float>({1, 2, 3});
  expect_values(addmm(bias, zeros({2, 0}), zeros({0, 3})), {1, 2, 3, 1, 2, 3});
  EXPECT_EQ(addmm(bias, zeros({0, 4}), zeros({4, 3})).shape(), Shape({0, 3}));
}

TEST(Addmm, ErrorsNameTheProblem) {
  EXPECT_THROW_MSG(addmm(zeros({4}), zeros({2, 3}), zeros({3, 5})), "addmm");
  EXPECT_THROW_MSG(addmm(zeros({3, 2, 5}), zeros({2, 3}), zeros({3, 5})),
                   "addmm: a bias of shape [3, 2, 5] does not broadcast to the product's [2, 5]");
  EXPECT_THROW_MSG(addmm(zeros({5}), zeros({2, 3}), zeros({4, 5})),
                   "addmm: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_THROW_MSG(addmm(zeros({5}, {.dtype = kFloat64}), zeros({2, 3}), zeros({3, 5})),
                   "addmm: expected a bias of the operands' dtype float32, got float64");
  EXPECT_THROW_MSG(addmm(zeros({5}), zeros({2, 3, 1}), zeros({3, 5})), "addmm: expected 2-D operands");
}

// Gradients against finite differences, for the bias row and for a column
// bias (broadcast the other way); a transposed weight gets a contiguous
// gradient in its own layout, as through mm.
TEST(Addmm, GradientsMatchFiniteDifferences) {
  Generator gen(13);
  Tensor x = randn({5, 4}, {.dtype = kFloat64, .requires_grad = true}, &gen);
  Tensor w = randn({3, 4}, {.dtype = kFloat64, .requires_grad = true}, &gen);
  Tensor row = randn({3}, {.dtype = kFloat64, .requires_grad = true}, &gen);
  Tensor column = randn({5, 1}, {.dtype = kFloat64, .requires_grad = true}, &gen);
  auto r = autograd::gradcheck([](const TensorList& in) { return addmm(in[2], in[0], in[1].t()).tanh(); },
                               {x, w, row});
  EXPECT_TRUE(r.ok) << r.message;
  r = autograd::gradcheck([](const TensorList& in) { return addmm(in[2], in[0], in[1].t()).tanh(); }, {x, w, column});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor dy = randn({5, 3}, {.dtype = kFloat64}, &gen);
  TensorList g = autograd::grad({addmm(row, x, w.t())}, {row, x, w}, {dy});
  expect_values(g[0], values(dy.sum({0})), 1e-12);
  expect_values(g[2], naive_mm(dy.t(), x.detach()), 1e-12);
  EXPECT_TRUE(g[2].is_contiguous());
}

// 16-bit results round once, after the bias is added (as cuBLASLt's epilogue
// does), not once for the product and again for the sum (rounding_probe.h).
TEST(Addmm, SixteenBitResultsRoundOnce) {
  for (DType dtype : {kBFloat16, kFloat16}) {
    const testing::RoundingProbe p = testing::rounding_probe(dtype, 4);
    expect_values(addmm(p.bias, p.a, p.b), std::vector<double>(16, p.rounded_once), 0.0);
    expect_values(mm(p.a, p.b) + p.bias, std::vector<double>(16, p.rounded_twice), 0.0);  // the composite
  }
}

// ---- float32 products on the packed kernel (tensor/cpu/gemm.h picks it: packed_gemm_wins) ----

// Each output of the packed kernel is one float32 chain of fused
// multiply-adds, from the bias (or zero) through p = 0 .. k - 1.
std::vector<float> fma_chains(const Tensor& a, const Tensor& b, const Tensor& bias) {
  const std::vector<double> x = values(a.contiguous()), y = values(b.contiguous());
  const std::vector<double> start = bias.defined() ? values(bias) : std::vector<double>(b.size(1), 0.0);
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  std::vector<float> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = static_cast<float>(start[j]);
      for (int64_t p = 0; p < k; ++p)
        acc = std::fma(static_cast<float>(x[i * k + p]), static_cast<float>(y[p * n + j]), acc);
      out[i * n + j] = acc;
    }
  return out;
}

// A 2-D float32 tensor with one unit stride as gemm's operand.
cpu::GemmOperand<float> operand_of(const Tensor& t) {
  const bool rows = t.stride(1) == 1;
  return {t.data_ptr<float>(), rows ? t.stride(0) : t.stride(1), rows};
}

// Shapes the packed kernel takes, bit for bit against the chains: row tiles
// of 6 with every rest (and a rest of 2 split 4 + 4), groups of 8 tiles of
// a column-major a, a last panel narrower than 16, k not a multiple of 8
// (the transposed packing's tail); a row-major, with a row pitch, and
// column-major (a weight gradient's dy^T); b row-major and transposed (a
// Linear's weight); with and without a bias; at 1 and 2 threads.
TEST(Matmul, PackedFloat32ProductsAreFusedMultiplyAddChains) {
  cpu::set_avx512_gemm(false);  // the packed kernel runs where AVX-512 does not
  Generator gen(31);
  const int64_t shapes[][3] = {{16, 1, 16}, {17, 13, 72}, {64, 128, 384}, {23, 37, 130}, {50, 9, 32}, {100, 512, 128}};
  for (const auto& [m, k, n] : shapes) {
    SCOPED_TRACE(::testing::Message() << m << " x " << k << " by " << k << " x " << n);
    const Tensor a = randn({m, k}, {}, &gen), pitched = randn({m, k + 5}, {}, &gen).narrow(1, 2, k);
    const Tensor columns = randn({k, m + 3}, {}, &gen).narrow(1, 1, m).t();
    const Tensor b = randn({k, n}, {}, &gen), weight = randn({n, k}, {}, &gen);
    const Tensor bias = randn({n}, {}, &gen);
    for (const Tensor& x : {a, pitched, columns})
      for (const Tensor& y : {b, weight.t()})
        for (const Tensor& row : {Tensor(), bias}) {
          const std::vector<float> expected = fma_chains(x, y, row);
          for (int threads : {1, 2}) {
            const Tensor out =
                testing::on_omp_threads(threads, [&] { return row.defined() ? addmm(row, x, y) : mm(x, y); });
            const float* got = out.data_ptr<float>();
            int64_t differing = 0;
            for (int64_t i = 0; i < m * n; ++i) differing += got[i] != expected[i];
            EXPECT_EQ(differing, 0) << threads << " threads, bias " << row.defined();
          }
        }
  }
  cpu::set_avx512_gemm(true);
}

// The routing's edges: too few rows, too narrow a right operand or one
// padded by more than an eighth, one over 1 MB, or a column-major left
// operand deeper than 1024 go to Eigen's GEMM; all agree with the triple
// loop.
TEST(Matmul, ProductsBesideThePackedKernelAgreeWithTheTripleLoop) {
  cpu::set_avx512_gemm(false);
  Generator gen(32);
  const Tensor a = randn({15, 64}, {}, &gen), tall = randn({64, 64}, {}, &gen);
  const Tensor narrow = randn({64, 15}, {}, &gen), wide = randn({64, 64}, {}, &gen);
  const Tensor padded = randn({64, 65}, {}, &gen);
  const Tensor deep_columns = randn({1100, 32}, {}, &gen).t(), deep = randn({1100, 64}, {}, &gen);
  expect_values(mm(a, wide), naive_mm(a, wide), 1e-4);
  expect_values(mm(tall, narrow), naive_mm(tall, narrow), 1e-4);
  expect_values(mm(tall, padded), naive_mm(tall, padded), 1e-4);
  expect_values(mm(deep_columns, deep), naive_mm(deep_columns, deep), 1e-3);
  const Tensor big = randn({1025, 256}, {}, &gen), rows = randn({32, 1025}, {}, &gen);  // 1 MB and more
  expect_values(mm(rows, big), naive_mm(rows, big), 1e-3);
  cpu::set_avx512_gemm(true);
}

// gemm's alpha and accumulate on the packed kernel (the fused attention's
// products): each sum is the chain from zero, then c = alpha sum, or
// alpha sum + c as one fused multiply-add, bit for bit.
TEST(Matmul, PackedGemmScalesAndAccumulatesAfterTheChain) {
  cpu::set_avx512_gemm(false);
  Generator gen(33);
  const int64_t shapes[][3] = {{16, 8, 16}, {23, 37, 130}, {64, 32, 64}};
  for (const auto& [m, k, n] : shapes) {
    const Tensor a = randn({m, k}, {}, &gen), columns = randn({k, m}, {}, &gen).t();
    const Tensor b = randn({k, n}, {}, &gen), weight = randn({n, k}, {}, &gen).t();
    const Tensor before = randn({m, n}, {}, &gen);
    for (const Tensor& x : {a, columns})
      for (const Tensor& y : {b, weight})
        for (float alpha : {1.0f, 0.3f})
          for (bool accumulate : {false, true}) {
            SCOPED_TRACE(::testing::Message() << m << " x " << k << " x " << n << ", alpha " << alpha
                                              << (accumulate ? ", accumulating" : ""));
            const std::vector<float> sums = fma_chains(x, y, Tensor());
            const std::vector<double> old = values(before);
            Tensor c = before.clone();
            cpu::gemm<float>(operand_of(x), operand_of(y), c.data_ptr<float>(), n, m, n, k, alpha, accumulate);
            int64_t differing = 0;
            for (int64_t i = 0; i < m * n; ++i) {
              const float expected =
                  accumulate ? std::fma(alpha, sums[i], static_cast<float>(old[i])) : alpha * sums[i];
              differing += c.data_ptr<float>()[i] != expected;
            }
            EXPECT_EQ(differing, 0);
          }
  }
  cpu::set_avx512_gemm(true);
}

// multiply_leading: a product by B's first k rows and n columns (the
// attention's blocks against a slice's packed keys) is the chain over
// those k, bit for bit, into exactly the m x n outputs: rows and columns
// cut inside a panel and at its edge, a row-major and a column-major a.
TEST(Matmul, PackedLeadingPartIsTheProductByThatPart) {
  Generator gen(34);
  const int64_t rows = 64, cols = 50;  // B: 64 x 50, panels of 16, 16, 16, 2
  const Tensor b = randn({rows, cols}, {}, &gen);
  const cpu::PackedMatrix packed({b.data_ptr<float>(), cols, /*row_major=*/true}, rows, cols);
  const int64_t parts[][3] = {{16, 64, 50}, {7, 33, 17}, {20, 16, 48}, {5, 1, 1}, {30, 40, 32}};
  for (const auto& [m, k, n] : parts) {
    SCOPED_TRACE(::testing::Message() << m << " x " << k << " by B[0:" << k << ", 0:" << n << "]");
    const Tensor a = randn({m, k}, {}, &gen), columns = randn({k, m}, {}, &gen).t();
    const Tensor part = b.narrow(0, 0, k).narrow(1, 0, n);
    for (const Tensor& x : {a, columns}) {
      const std::vector<float> expected = fma_chains(x, part, Tensor());
      Tensor c = full({m, n + 3}, 7.0);  // 3 columns beyond the product stay 7
      packed.multiply_leading(operand_of(x), m, k, n, c.data_ptr<float>(), n + 3);
      int64_t differing = 0, touched = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) differing += c.data_ptr<float>()[i * (n + 3) + j] != expected[i * n + j];
        for (int64_t j = n; j < n + 3; ++j) touched += c.data_ptr<float>()[i * (n + 3) + j] != 7.0f;
      }
      EXPECT_EQ(differing, 0) << (x.stride(1) == 1 ? "row-major a" : "column-major a");
      EXPECT_EQ(touched, 0);
    }
  }
}

// ---- prepared products (Backend::prepare_product): a right operand used many times ----

// The CPU's packed micro-kernel against the triple loop: row tiles of 6
// with every rest (1 to 5 rows), panels of 16 with a narrower last one,
// K = 1, b row-major and transposed, a with a row pitch and with no unit
// stride. The row after out's must stay untouched.
TEST(PreparedProduct, PackedRunsMatchTheTripleLoop) {
  cpu::set_avx512_gemm(false);  // the packed kernel is for CPUs without AVX-512
  Backend& cpu = backend_for(Device::cpu());
  Generator gen(21);
  const int64_t shapes[][3] = {{1, 1, 1}, {5, 37, 3}, {7, 1, 16}, {32, 128, 512}, {64, 512, 128},
                               {67, 128, 20}, {9, 13, 40}, {10, 8, 17}};
  for (const auto& [m, k, n] : shapes) {
    SCOPED_TRACE(::testing::Message() << m << " x " << k << " by " << k << " x " << n);
    const Tensor b = randn({k, n}, {}, &gen), bt = randn({n, k}, {}, &gen).t();
    const Tensor pitched = randn({m, k + 3}, {}, &gen).narrow(1, 1, k);
    const Tensor stepped = randn({m, 2 * k}, {}, &gen).slice(1, 0, 2 * k, 2);
    for (const Tensor& w : {b, bt}) {
      const std::unique_ptr<Backend::PreparedProduct> by_w = cpu.prepare_product(w);
      for (const Tensor& a : {pitched, stepped}) {
        Tensor buffer = full({m + 1, n}, 7.0);
        by_w->run(a, buffer.narrow(0, 0, m));
        expect_values(buffer.narrow(0, 0, m), naive_mm(a, w), 2e-6 * k);
        expect_values(buffer.select(0, m), std::vector<double>(n, 7.0), 0);
      }
    }
  }
  cpu::set_avx512_gemm(true);
}

// The CPU packs a float32 operand once: its values are those it had when
// prepared. The default (matmul at every run) reads the operand as it is.
TEST(PreparedProduct, CpuFloat32IsPackedWhenPrepared) {
  cpu::set_avx512_gemm(false);
  Backend& cpu = backend_for(Device::cpu());
  Generator gen(22);
  Tensor a = randn({6, 8}, {}, &gen), w = randn({8, 5}, {}, &gen);
  const std::vector<double> before = naive_mm(a, w);
  const std::unique_ptr<Backend::PreparedProduct> packed = cpu.prepare_product(w);
  const std::unique_ptr<Backend::PreparedProduct> each_run = cpu.Backend::prepare_product(w);
  w.mul_(2.0);
  Tensor out = empty({6, 5});
  packed->run(a, out);
  expect_values(out, before, 1e-5);
  each_run->run(a, out);
  expect_values(out, naive_mm(a, w), 1e-5);
  cpu::set_avx512_gemm(true);
}

// Other dtypes take the default: float64 to double precision.
TEST(PreparedProduct, Float64RunsTheMatmul) {
  Generator gen(23);
  const Tensor a = randn({9, 33}, {.dtype = kFloat64}, &gen), w = randn({33, 7}, {.dtype = kFloat64}, &gen);
  Tensor out = empty({9, 7}, {.dtype = kFloat64});
  backend_for(Device::cpu()).prepare_product(w.t().contiguous().t())->run(a, out);
  expect_values(out, naive_mm(a, w), 1e-12);
}

// Blocks of rows on several threads at once, as an RNN's row blocks run.
TEST(PreparedProduct, ThreadsRunIntoTheirOwnRows) {
  cpu::set_avx512_gemm(false);
  Generator gen(24);
  const Tensor a = randn({64, 128}, {}, &gen), w = randn({512, 128}, {}, &gen).t();
  const std::unique_ptr<Backend::PreparedProduct> by_w = backend_for(Device::cpu()).prepare_product(w);
  Tensor out = empty({64, 512});
  std::vector<std::thread> threads;
  for (int64_t first = 0; first < 64; first += 16)
    threads.emplace_back([&, first] { by_w->run(a.narrow(0, first, 16), out.narrow(0, first, 16)); });
  for (std::thread& t : threads) t.join();
  expect_values(out, naive_mm(a, w), 2e-6 * 128);
  cpu::set_avx512_gemm(true);
}

TEST(PreparedProduct, ErrorsNameTheProblem) {
  Backend& cpu = backend_for(Device::cpu());
  EXPECT_THROW_MSG(cpu.prepare_product(zeros({4})), "prepare_product: the right operand must be a matrix, got [4]");
  const std::unique_ptr<Backend::PreparedProduct> by_w = cpu.prepare_product(zeros({3, 5}));
  EXPECT_THROW_MSG(by_w->run(zeros({2, 4}), empty({2, 5})),
                   "PreparedProduct::run: expected a (M, 3) and out (M, 5) for a [3, 5] right operand, got [2, 4]");
  EXPECT_THROW_MSG(by_w->run(zeros({2, 3}), empty({3, 5})), "got [2, 3] and [3, 5]");
  EXPECT_THROW_MSG(by_w->run(zeros({2, 3}, {.dtype = kFloat64}), empty({2, 5})),
                   "PreparedProduct::run: a is float64 and out float32; the right operand is float32");
  EXPECT_THROW_MSG(by_w->run(zeros({2, 3}), empty({5, 2}).t()), "PreparedProduct::run: out must be contiguous");
}

}  // namespace
}  // namespace loom
