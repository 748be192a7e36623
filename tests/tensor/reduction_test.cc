// Reductions against references computed with plain loops in double.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "tests/omp_threads.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::expect_values;
using testing::values;

// Reference reduction of a contiguous (d0, d1, d2) tensor over `dims`.
std::vector<double> reference(const Tensor& x, const std::vector<int>& dims,
                              const std::function<double(const std::vector<double>&)>& reduce) {
  std::vector<double> v = values(x.contiguous());
  const int64_t n0 = x.size(0), n1 = x.size(1), n2 = x.size(2);
  auto reduced = [&](int d) { return std::find(dims.begin(), dims.end(), d) != dims.end(); };
  std::vector<double> out;
  for (int64_t i = 0; i < (reduced(0) ? 1 : n0); ++i)
    for (int64_t j = 0; j < (reduced(1) ? 1 : n1); ++j)
      for (int64_t k = 0; k < (reduced(2) ? 1 : n2); ++k) {
        std::vector<double> group;
        for (int64_t a = 0; a < n0; ++a)
          for (int64_t b = 0; b < n1; ++b)
            for (int64_t c = 0; c < n2; ++c)
              if ((reduced(0) || a == i) && (reduced(1) || b == j) && (reduced(2) || c == k))
                group.push_back(v[(a * n1 + b) * n2 + c]);
        out.push_back(reduce(group));
      }
  return out;
}

double sum_of(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}

TEST(Reductions, EveryDimSubsetAgainstReference) {
  Generator gen(3);
  Tensor base = randn({4, 5, 6}, {.dtype = kFloat64}, &gen);
  const std::vector<std::vector<int>> subsets = {{0}, {1}, {2}, {0, 1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (const Tensor& x : {base, base.permute({0, 1, 2}).transpose(0, 2).contiguous().transpose(0, 2)}) {
    for (const auto& dims : subsets) {
      std::vector<int64_t> d64(dims.begin(), dims.end());
      SCOPED_TRACE(::testing::Message() << "dims " << Shape(d64) << (x.is_contiguous() ? "" : " strided"));
      expect_values(sum(x, d64, true), reference(x, dims, sum_of), 1e-12);
      expect_values(mean(x, d64), reference(x, dims, [](auto& g) { return sum_of(g) / g.size(); }), 1e-12);
      expect_values(amax(x, d64), reference(x, dims, [](auto& g) { return *std::max_element(g.begin(), g.end()); }));
      expect_values(amin(x, d64), reference(x, dims, [](auto& g) { return *std::min_element(g.begin(), g.end()); }));
      expect_values(var(x, d64), reference(x, dims, [](auto& g) {
                      double m = sum_of(g) / g.size(), s = 0;
                      for (double v : g) s += (v - m) * (v - m);
                      return s / (g.size() - 1);
                    }), 1e-10);
    }
  }
}

TEST(Reductions, KeepdimAndShapes) {
  Tensor x = ones({2, 3, 4});
  EXPECT_EQ(sum(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(sum(x, {-1, 0}).shape(), (Shape{3}));
  EXPECT_EQ(sum(x).shape(), (Shape{}));
  EXPECT_DOUBLE_EQ(sum(x).item(), 24);
  EXPECT_EQ(x.sum({0, 2}, true).shape(), (Shape{1, 3, 1}));
  EXPECT_THROW_MSG(sum(x, {1, -2}), "sum: dimension 1 appears twice");
  EXPECT_THROW_MSG(sum(x, {3}), "sum: dimension 3 is out of range");
}

TEST(Reductions, IntegerAndBoolSumsGiveInt64) {
  Tensor b = from_vector<bool>({true, false, true, true});
  EXPECT_EQ(sum(b).dtype(), kInt64);
  EXPECT_EQ(sum(b).item<int64_t>(), 3);
  EXPECT_EQ(sum(from_vector<uint8_t>({200, 100})).item<int64_t>(), 300);  // no uint8 overflow
  EXPECT_THROW_MSG(mean(arange(4)), "mean: expected a floating-point tensor, got int64");
}

TEST(Reductions, FloatSumOfManyElementsIsAccurate) {
  // One million 0.1f: naive float accumulation drifts by ~1%; loom's stays exact to float rounding.
  Tensor x = full({1000, 1000}, 0.1f);
  EXPECT_NEAR(sum(x).item(), 1e6 * static_cast<double>(0.1f), 1.0);
  EXPECT_NEAR(sum(x, {0}).select(0, 7).item(), 1000 * static_cast<double>(0.1f), 1e-3);
}

// Sums over leading dims (a Linear's bias gradient) take a path of their own
// on the CPU, a row at a time in tiles of columns split over threads: 700
// columns fit one tile, 2500 take three (tiles of 1024), split over threads
// in slices. Each column is summed in row order, so the bits do not depend
// on the thread count.
TEST(Reductions, LeadingDimsSumOfAWideMatrix) {
  Generator gen(8);
  for (DType dtype : {kFloat32, kFloat64})
    for (int64_t width : {700, 2500}) {
      Tensor x = randn({3, 111, width}, {.dtype = dtype}, &gen);
      std::vector<double> v = values(x), expected(width, 0.0);
      for (int64_t r = 0; r < 333; ++r)
        for (int64_t c = 0; c < width; ++c) expected[c] += v[r * width + c];
      const std::vector<double> one_thread = testing::on_omp_threads(1, [&] { return values(sum(x, {0, 1})); });
      const std::vector<double> three_threads = testing::on_omp_threads(3, [&] { return values(sum(x, {0, 1})); });
      expect_values(sum(x, {0, 1}), expected, dtype == kFloat32 ? 1e-5 : 1e-12);
      EXPECT_EQ(one_thread, three_threads) << "width " << width;
    }
}

TEST(Reductions, ArgmaxArgmin) {
  Tensor x = from_vector<float>({1, 5, 5, 2, 9, 0}, {2, 3});
  expect_values(argmax(x, 1), {1, 1});  // the first of tied maxima
  expect_values(argmin(x, 1), {0, 2});
  expect_values(argmax(x, 0), {1, 1, 0});
  EXPECT_EQ(argmax(x, 1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(argmax(x, 1).dtype(), kInt64);
  expect_values(argmax(x.t(), 0), {1, 1});  // strided input
  EXPECT_THROW_MSG(argmax(zeros({0, 3}), 0), "argmax: cannot reduce over dimension 0 of size 0");
}

TEST(Reductions, NanPropagatesThroughMaxMin) {
  Tensor x = from_vector<float>({1, NAN, 3});
  EXPECT_TRUE(std::isnan(amax(x).item()));
  EXPECT_TRUE(std::isnan(amin(x).item()));
  EXPECT_EQ(argmax(x, 0).item<int64_t>(), 1);
}

TEST(Reductions, EmptyInputs) {
  EXPECT_DOUBLE_EQ(sum(zeros({0, 3})).item(), 0.0);
  expect_values(sum(zeros({0, 3}), {0}), {0, 0, 0});
  EXPECT_THROW_MSG(amax(zeros({0, 3})), "amax: cannot reduce over dimension 0 of size 0");
}

TEST(Softmax, RowsSumToOneAndMatchReference) {
  Generator gen(5);
  Tensor x = randn({3, 4, 5}, {.dtype = kFloat64}, &gen) * 10.0;
  for (int dim = 0; dim < 3; ++dim) {
    Tensor p = softmax(x, dim);
    Tensor lp = log_softmax(x, dim);
    expect_values(sum(p, {dim}), std::vector<double>(x.numel() / x.size(dim), 1.0), 1e-12);
    expect_values(lp, values(log(p)), 1e-10);
    // softmax(x) == exp(x - max) / sum(exp(x - max)), written out.
    Tensor e = exp(x - amax(x, {dim}, true));
    expect_values(p, values(e / sum(e, {dim}, true)), 1e-12);
  }
  // Large inputs do not overflow: the max is subtracted first.
  expect_values(softmax(from_vector<float>({1000, 1000}), 0), {0.5, 0.5});
  expect_values(softmax(x.transpose(0, 2), 1), values(softmax(x.transpose(0, 2).contiguous(), 1)), 1e-12);
}

// float32 softmax and log-softmax over contiguous rows (exp8 in vector
// lanes, the last partial vector under a mask, forward and backward)
// against float64 (Eigen's exp; its gradients are held to finite
// differences by tests/autograd's gradcheck): rows of 1, 7, 8, 65 (a
// vocabulary) and 100, and a gradient that is not all ones.
TEST(Softmax, Float32RowsMatchFloat64) {
  Generator gen(7);
  for (int64_t n : {1, 7, 8, 65, 100}) {
    const Tensor x = randn({5, n}, {.dtype = kFloat64}, &gen) * 4.0;
    const Tensor upstream = randn({5, n}, {.dtype = kFloat64}, &gen);
    for (bool log : {false, true}) {
      SCOPED_TRACE(std::string(log ? "log_softmax" : "softmax") + " of rows of " + std::to_string(n));
      Tensor x64 = x.detach().requires_grad_(), x32 = x.to(kFloat32).requires_grad_();
      Tensor y64 = log ? log_softmax(x64, 1) : softmax(x64, 1), y32 = log ? log_softmax(x32, 1) : softmax(x32, 1);
      y64.backward(upstream);
      y32.backward(upstream.to(kFloat32));
      EXPECT_LT(testing::max_rel_error(y32, y64), 4e-6);
      EXPECT_LT(testing::max_rel_error(x32.grad(), x64.grad()), 4e-6);
    }
  }
}

// attention_softmax against what it fuses: a scale, masked_fill(-inf) of the
// future, and softmax; values and gradients.
TEST(AttentionSoftmax, EqualsScaleMaskAndSoftmaxComposed) {
  Generator gen(6);
  const Tensor scores = randn({2, 3, 6, 6}, {.dtype = kFloat64}, &gen) * 4.0;
  const Tensor upstream = randn({2, 3, 6, 6}, {.dtype = kFloat64}, &gen);
  const Tensor positions = arange(6, {.dtype = kInt64});
  const Tensor future = positions.unsqueeze(0) > positions.unsqueeze(1);  // key after the query
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    Tensor fused_in = scores.detach().requires_grad_(), composed_in = scores.detach().requires_grad_();
    Tensor fused = attention_softmax(fused_in, 0.3, causal);
    Tensor scaled = composed_in * 0.3;
    Tensor composed = softmax(causal ? masked_fill(scaled, future, -INFINITY) : scaled, -1);
    expect_values(fused, values(composed), 1e-14);
    fused.backward(upstream);
    composed.backward(upstream);
    expect_values(fused_in.grad(), values(composed_in.grad()), 1e-14);
    if (causal) {  // the future has probability 0 and gets no gradient
      EXPECT_EQ(fused.select(-2, 1).narrow(-1, 2, 4).abs().sum().item(), 0.0);
      EXPECT_EQ(fused_in.grad().select(-2, 4).narrow(-1, 5, 1).abs().sum().item(), 0.0);
    }
  }
  // float32 rows of many lengths (vectorised, and a causal row of 1); bfloat16 rounds the float32 result once.
  for (int64_t t : {1, 7, 64, 129}) {
    Tensor x = randn({2, t, t}, {}, &gen) * 3.0;
    Tensor e = softmax(masked_fill(x * 0.125, arange(t).unsqueeze(0) > arange(t).unsqueeze(1), -INFINITY), -1);
    EXPECT_LT(testing::max_rel_error(attention_softmax(x, 0.125, true), e), 1e-6) << "T " << t;
    Tensor xb = x.to(kBFloat16);
    EXPECT_EQ(values(attention_softmax(xb, 0.125, true)), values(attention_softmax(xb.to(kFloat32), 0.125, true).to(kBFloat16)));
  }
  EXPECT_THROW_MSG(attention_softmax(zeros({2, 3, 4}), 1.0, true), "attention_softmax: causal attention needs scores (..., T, T), got [2, 3, 4]");
  EXPECT_THROW_MSG(attention_softmax(zeros({4}), 1.0, false), "expected scores (..., T_q, T_k), got [4]");
  EXPECT_THROW_MSG(attention_softmax(zeros({4, 4}), 0.0, false), "attention_softmax: scale must be positive and finite, got 0");
  EXPECT_THROW_MSG(attention_softmax(zeros({4, 4}), INFINITY, true), "scale must be positive and finite");
}

TEST(Reduction, ExtremaOfInfiniteSlicesAreInfinite) {
  // max starts from -inf, not from the lowest finite value.
  EXPECT_EQ(amax(from_vector<float>({-INFINITY, -INFINITY})).item(), -INFINITY);
  EXPECT_EQ(amin(from_vector<double>({INFINITY}, {1, 1}), {1}).item(), INFINITY);
}

// A row's sum must not depend on where the row lies: Eigen's sum() of a
// plain map starts its vector lanes at the first aligned address. The same
// float64 rows at offsets 0-3 elements (every place in a 32-byte vector).
TEST(Reductions, RowSumsGiveTheSameBitsAtAnyAddress) {
  Generator gen(43);
  const int64_t rows = 6, cols = 29;
  const Tensor x0 = randn({rows, cols}, {.dtype = kFloat64}, &gen) * 1e3;
  std::vector<double> first;
  for (int64_t offset = 0; offset < 4; ++offset) {
    Tensor buffer = zeros({rows * cols + 4}, {.dtype = kFloat64});
    const Tensor x = buffer.narrow(0, offset, rows * cols).view({rows, cols});
    x.copy_(x0);
    const std::vector<double> got = values(x.sum({1}));
    if (offset == 0)
      first = got;
    else
      EXPECT_EQ(got, first) << "offset " << offset << " elements";
  }
}

}  // namespace
}  // namespace loom
