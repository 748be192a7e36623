// Reductions, arg-reductions and softmax on the GPU against the CPU backend:
// every reduction kernel shape (warp rows, block rows split over blocks,
// columns, few elements per output), non-contiguous inputs, NaN and ties,
// and softmax rows from 1 element to longer than the register kernels hold.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::gpu;
using testing::non_contiguous;
using testing::random;

constexpr double kTol = 1e-4;

struct ReduceCase {
  Shape shape;
  std::vector<int64_t> dims;  // empty: all
};

std::vector<ReduceCase> reduce_cases() {
  return {
      {{}, {}},
      {{1000}, {}},
      {{(1 << 22) + 17}, {}},         // one output: split over many blocks
      {{37, 41}, {1}},                // warp per row
      {{37, 41}, {0}},                // columns
      {{3, 50000}, {1}},              // block rows, split
      {{50000, 3}, {0}},              // few columns, long: split slices
      {{200, 2}, {1}},                // two elements per output
      {{6, 5, 4, 3}, {0, 2}},         // reduced dims that do not merge
      {{6, 5, 4, 3}, {1, 2, 3}},      // reduced dims that merge
      {{6, 5, 4, 3}, {0, 1, 2, 3}},
      {{8, 1, 9}, {1}},               // a size-1 reduced dim
      {{0, 4}, {0}},                  // sum of nothing
  };
}

class CudaReduce : public ::testing::TestWithParam<DType> {};

TEST_P(CudaReduce, SumMeanMaxMinMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 300;
  for (const ReduceCase& c : reduce_cases()) {
    Tensor x = random(c.shape, dtype, ++seed);
    const std::string what = ::testing::PrintToString(c.shape.vec()) + " over " + ::testing::PrintToString(c.dims);
    for (bool keepdim : {false, true}) {
      const std::vector<std::pair<std::string, Tensor>> inputs = {{"contiguous", gpu(x)},
                                                                  {"non_contiguous", non_contiguous(gpu(x))}};
      for (const auto& [layout, input] : inputs) {
        const std::string w = what + " " + layout + (keepdim ? " keepdim" : "");
        expect_close(sum(input, c.dims, keepdim), sum(x, c.dims, keepdim), kTol, "sum " + w);
        if (x.numel() == 0) continue;
        expect_close(mean(input, c.dims, keepdim), mean(x, c.dims, keepdim), kTol, "mean " + w);
        expect_equal(amax(input, c.dims, keepdim), amax(x, c.dims, keepdim), "amax " + w);
        expect_equal(amin(input, c.dims, keepdim), amin(x, c.dims, keepdim), "amin " + w);
      }
    }
  }
}

TEST_P(CudaReduce, TransposedAndSlicedInputs) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({64, 300}, dtype, 1);
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}}) {
    expect_close(sum(gpu(x).t(), dims), sum(x.t(), dims), kTol, "sum of a transpose");
    expect_equal(amax(gpu(x).slice(1, 1, 300, 3), dims), amax(x.slice(1, 1, 300, 3), dims), "amax of a slice");
    expect_close(var(gpu(x).t(), dims), var(x.t(), dims), kTol, "var of a transpose");
  }
}

TEST_P(CudaReduce, ArgmaxArgminFirstExtremumAlongEachDim) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  // Few distinct values: many ties, which must resolve to the first index.
  Tensor x = (random({6, 70, 5}, dtype, 2, 0, 4)).to(kInt64).to(dtype);
  for (int64_t dim = 0; dim < 3; ++dim)
    for (bool keepdim : {false, true}) {
      expect_equal(argmax(gpu(x), dim, keepdim), argmax(x, dim, keepdim), "argmax dim " + std::to_string(dim));
      expect_equal(argmin(gpu(x), dim, keepdim), argmin(x, dim, keepdim), "argmin dim " + std::to_string(dim));
      expect_equal(argmax(non_contiguous(gpu(x)), dim, keepdim), argmax(x, dim, keepdim), "argmax strided");
    }
  Tensor long_rows = random({3, 100000}, dtype, 3);
  expect_equal(argmax(gpu(long_rows), 1), argmax(long_rows, 1), "argmax of long rows");
  expect_equal(argmin(gpu(long_rows), 0), argmin(long_rows, 0), "argmin over two rows");
}

TEST_P(CudaReduce, NanPropagatesAndIsFoundFirst) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({4, 9}, dtype, 4);
  std::vector<double> v = testing::values(x);
  v[2 * 9 + 5] = NAN;
  v[2 * 9 + 7] = NAN;
  v[3 * 9 + 0] = NAN;
  Tensor with_nan = from_vector<double>(v, {4, 9}).to(dtype);
  expect_close(amax(gpu(with_nan), {1}), amax(with_nan, {1}), 0, "amax with NaN");
  expect_close(amin(gpu(with_nan), {0}), amin(with_nan, {0}), 0, "amin with NaN");
  expect_equal(argmax(gpu(with_nan), 1), argmax(with_nan, 1), "argmax with NaN");
  expect_equal(argmin(gpu(with_nan), 1), argmin(with_nan, 1), "argmin with NaN");
  EXPECT_TRUE(std::isnan(sum(gpu(with_nan)).item()));
}

// Contiguous ranges are read 16 bytes a load from a 16-byte boundary on, and
// element by element where a range starts off one: every start modulo the
// pack, for one long range split over blocks and for rows of both widths.
TEST_P(CudaReduce, RangesStartingOnAndOffSixteenByteBoundaries) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const int64_t n = (1 << 20) + 3;
  Tensor x = random({n}, dtype, 8);
  const Tensor x_gpu = gpu(x);
  for (int64_t start = 0; start < 5; ++start) {
    const std::string what = " from element " + std::to_string(start);
    const Tensor tail = x.narrow(0, start, n - start), tail_gpu = x_gpu.narrow(0, start, n - start);
    expect_close(sum(tail_gpu), sum(tail), kTol, "sum" + what);
    expect_equal(amax(tail_gpu), amax(tail), "amax" + what);
    expect_equal(argmin(tail_gpu, 0), argmin(tail, 0), "argmin" + what);
  }
  for (int64_t row : {int64_t{50001}, int64_t{1001}}) {  // a block a row (split), a warp a row
    Tensor rows = random({7, row}, dtype, 9);
    const std::string what = " of rows of " + std::to_string(row);
    expect_close(sum(gpu(rows), {1}), sum(rows, {1}), kTol, "sum" + what);
    expect_equal(amin(gpu(rows), {1}), amin(rows, {1}), "amin" + what);
    expect_equal(argmax(gpu(rows), 1), argmax(rows, 1), "argmax" + what);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaReduce, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

TEST(CudaReduceIntegers, SumsAndExtremaOfIntegersAndBools) {
  LOOM_REQUIRE_CUDA();
  Tensor i = random({300, 70}, kFloat64, 5, -1000, 1000).to(kInt64);
  Tensor u = random({300, 70}, kFloat64, 6, 0, 255).to(kUInt8);
  Tensor b = random({300, 70}, kFloat64, 7) > 0.0;
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}}) {
    expect_equal(sum(gpu(i), dims), sum(i, dims), "int64 sum");
    expect_equal(sum(gpu(u), dims), sum(u, dims), "uint8 sum (into int64)");
    expect_equal(sum(gpu(b), dims), sum(b, dims), "bool sum (into int64)");
    expect_equal(amax(gpu(u), dims), amax(u, dims), "uint8 amax");
    expect_equal(amin(gpu(i), dims), amin(i, dims), "int64 amin");
  }
  expect_equal(argmax(gpu(u), 0), argmax(u, 0), "uint8 argmax");
  // One long range of bytes, 16 to a load, from an aligned start and not.
  Tensor long_u = random({(1 << 20) + 5}, kFloat64, 10, 0, 255).to(kUInt8);
  for (int64_t start : {0, 3})
    expect_equal(sum(gpu(long_u).narrow(0, start, long_u.numel() - start)),
                 sum(long_u.narrow(0, start, long_u.numel() - start)), "long uint8 sum from " + std::to_string(start));
}

// Row lengths around every switch of the softmax kernels: warp (<= 1024),
// block in registers (<= 16384 forward, 8192 backward), three passes above.
const std::vector<int64_t>& row_sizes() {
  static const std::vector<int64_t> s = {1, 7, 32, 33, 100, 1000, 1024, 1025, 2048, 4096, 5000,
                                         8192, 8193, 16384, 16385, 20000};
  return s;
}

class CudaSoftmax : public ::testing::TestWithParam<DType> {};

// `op` (a softmax of some kind) and its gradient for upstream `dy`, on the GPU against the CPU.
void expect_op_and_gradient_as_cpu(const std::function<Tensor(const Tensor&)>& op, const Tensor& x, const Tensor& dy,
                                   const std::string& what) {
  auto run = [&](const Tensor& input, const Tensor& upstream, Tensor* grad) {
    Tensor leaf = input.detach().requires_grad_();
    Tensor y = op(leaf);
    y.backward(upstream);
    *grad = leaf.grad();
    return y;
  };
  Tensor dx_cpu, dx_gpu;
  Tensor y_cpu = run(x, dy, &dx_cpu);
  Tensor y_gpu = run(gpu(x), gpu(dy), &dx_gpu);
  expect_close(y_gpu, y_cpu, kTol, what);
  expect_close(dx_gpu, dx_cpu, kTol, what + " backward");
}

TEST_P(CudaSoftmax, ForwardAndBackwardOverRowsOfEverySize) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 400;
  for (int64_t size : row_sizes())
    for (bool log : {false, true}) {
      Tensor x = random({5, size}, dtype, ++seed, -8, 8);
      Tensor dy = random({5, size}, dtype, ++seed);
      const std::string what = std::string(log ? "log_softmax" : "softmax") + " rows of " + std::to_string(size);
      expect_op_and_gradient_as_cpu([&](const Tensor& t) { return log ? log_softmax(t, -1) : softmax(t, -1); }, x, dy,
                                    what);
    }
}

TEST_P(CudaSoftmax, AlongAnyDimAndOnStridedInputs) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({4, 7, 33}, dtype, 5, -5, 5);
  for (int64_t dim = 0; dim < 3; ++dim) {
    expect_close(softmax(gpu(x), dim), softmax(x, dim), kTol, "softmax dim " + std::to_string(dim));
    expect_close(log_softmax(non_contiguous(gpu(x)), dim), log_softmax(x, dim), kTol,
                 "log_softmax strided dim " + std::to_string(dim));
  }
  // Rows whose length is not a multiple of 4 take the scalar loads.
  Tensor odd = random({3, 4095}, dtype, 6);
  expect_close(softmax(gpu(odd), 1), softmax(odd, 1), kTol, "softmax of rows of 4095");
  expect_close(softmax(gpu(odd).narrow(1, 1, 4000), 1), softmax(odd.narrow(1, 1, 4000), 1), kTol,
               "softmax of a narrowed (copied) input");
  // Contiguous views one element into their buffers: rows of 100 (a multiple
  // of 4) at addresses that 4-wide loads must not take, x forward, dy backward.
  auto offset_rows = [](const Tensor& buffer) { return buffer.narrow(0, 1, 400).view({4, 100}); };
  auto run = [&](const Tensor& buffer, const Tensor& dy_buffer) {
    Tensor leaf = buffer.detach().requires_grad_();
    Tensor y = softmax(offset_rows(leaf), 1);
    y.backward(offset_rows(dy_buffer));
    return TensorList{y, leaf.grad()};
  };
  Tensor flat = random({401}, dtype, 7), flat_dy = random({401}, dtype, 8);
  const TensorList on_gpu = run(gpu(flat), gpu(flat_dy)), on_cpu = run(flat, flat_dy);
  expect_close(on_gpu[0], on_cpu[0], kTol, "softmax of an unaligned view");
  expect_close(on_gpu[1], on_cpu[1], kTol, "softmax backward from an unaligned view");
}

// attention_softmax's scale and causal mask in every kernel layout: rows of
// T (a warp per row up to 1024, a block in registers up to 16384, three
// passes above), a causal row per query position (row r is query r % T).
// The mask maps registers to row positions both ways load_row lays them
// out: scalar (T 50 and 130, 2 and 8 per lane; 1025) and 4-wide (100, 1024, 3000).
TEST_P(CudaSoftmax, AttentionSoftmaxScaledAndCausal) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 500;
  struct Case {
    int64_t batch, t;
    bool causal;
  };
  std::vector<Case> cases;
  for (int64_t t : {1, 5, 32, 50, 100, 130, 1024, 1025, 3000})
    for (bool causal : {false, true}) cases.push_back({3, t, causal});
  cases.push_back({2, 17000, false});  // scores (2, 64, 17000): long rows, not square
  // A causal row longer than 16384 needs 16385^2 scores: 1 GiB in float32 (only).
  if (dtype == kFloat32) cases.push_back({1, 16400, true});
  for (const Case& c : cases) {
    const Shape shape = c.causal ? Shape{c.batch, c.t, c.t} : Shape{c.batch, std::min<int64_t>(c.t, 64), c.t};
    Tensor x = random(shape, dtype, ++seed, -8, 8);
    Tensor dy = random(shape, dtype, ++seed);
    const std::string what = std::string(c.causal ? "causal" : "scaled") + " attention_softmax, T " + std::to_string(c.t);
    expect_op_and_gradient_as_cpu([&](const Tensor& t) { return attention_softmax(t, 0.3, c.causal); }, x, dy, what);
  }
}

// A causal row's masked elements are 0 each way, as on the CPU, also where
// the rest of the row is NaN (a NaN or an inf among the elements it sees, or
// all of them -inf) and where dy overflowed at a masked element. In the
// second batch entry (row r is query r % T), in each row layout: a warp
// (T 50 scalar, 100 4-wide), a block (1025, 3000), and above 8192 the
// backward's three passes.
TEST_P(CudaSoftmax, CausalMaskedElementsAreZeroBesideNanAndInfinities) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 600;
  std::vector<int64_t> sizes = {50, 100, 1025, 3000};
  if (dtype == kFloat32) sizes.push_back(8200);  // 2 x 8200^2 scores: 0.5 GiB in float32
  for (int64_t t : sizes) {
    std::vector<double> x = testing::values(random({2, t, t}, dtype, ++seed, -8, 8));
    std::vector<double> dy = testing::values(random({2, t, t}, dtype, ++seed));
    auto at = [&](int64_t query, int64_t key) { return (t + query) * t + key; };
    x[at(3, 1)] = NAN;  // seen: query 3's row NaN, its masked elements 0
    x[at(4, 4)] = INFINITY;
    for (int64_t key = 0; key <= 2; ++key) x[at(2, key)] = -INFINITY;  // all that query 2 sees
    x[at(6, 7)] = NAN;                                                  // masked: query 6 as without it
    dy[at(0, 5)] = INFINITY;                                            // masked: query 0's gradient finite
    dy[at(t - 2, t - 1)] = NAN;
    const Tensor xt = from_vector<double>(x, {2, t, t}).to(dtype);
    const Tensor dyt = from_vector<double>(dy, {2, t, t}).to(dtype);
    expect_op_and_gradient_as_cpu([](const Tensor& s) { return attention_softmax(s, 0.3, true); }, xt, dyt,
                                  "causal attention_softmax with NaN and infinities, T " + std::to_string(t));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaSoftmax, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

}  // namespace
}  // namespace loom
