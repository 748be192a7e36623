// Elementwise ops on the GPU against the CPU backend on the same random
// inputs, in every layout the CUDA kernels treat differently: contiguous
// (vectorised path), misaligned by one element (its scalar fallback),
// non-contiguous and transposed (strided path), broadcast operands (scalar
// and row broadcasts), and tensors large enough that threads loop.
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

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

double tolerance(DType dtype) { return dtype == kFloat32 ? 1e-5 : 1e-10; }

// The layouts of one input with the same values.
std::vector<std::pair<std::string, Tensor>> layouts(const Tensor& x) {
  std::vector<std::pair<std::string, Tensor>> out = {{"contiguous", x}};
  if (x.dim() == 0) return out;
  out.push_back({"non_contiguous", non_contiguous(x)});
  // One element in: the pointer is no longer 16-byte aligned.
  std::vector<int64_t> longer = x.shape().vec();
  longer.back() += 1;
  Tensor buffer = zeros(Shape(longer), x.options());
  Tensor shifted = buffer.narrow(-1, 1, x.size(-1));
  {
    NoGradGuard no_grad;
    shifted.copy_(x);
  }
  out.push_back({"misaligned", shifted});
  if (x.dim() == 2) out.push_back({"transposed", x.t().contiguous().t()});
  return out;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> s = {{}, {1}, {7}, {37, 41}, {2, 3, 1029}};
  return s;
}

struct UnaryCase {
  const char* name;
  Unary op;
  double low, high;
};

std::vector<UnaryCase> float_unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, -3, 3},
      {"square", [](const Tensor& x) { return square(x); }, -3, 3},
      {"sign", [](const Tensor& x) { return sign(x); }, -3, 3},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.5, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, 0.01, 10},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0, 10},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.1, 10},
      {"sin", [](const Tensor& x) { return sin(x); }, -4, 4},
      {"cos", [](const Tensor& x) { return cos(x); }, -4, 4},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -6, 6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -8, 8},
      {"relu", [](const Tensor& x) { return relu(x); }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); }, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }, -4, 4},
      {"pow2.5", [](const Tensor& x) { return pow(x, 2.5); }, 0, 3},
      {"clamp", [](const Tensor& x) { return clamp(x, -0.5, 1.0); }, -2, 2},
  };
}

class CudaFloatOps : public ::testing::TestWithParam<DType> {};

TEST_P(CudaFloatOps, UnaryOpsMatchTheCpuInEveryLayout) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 100;
  for (const UnaryCase& c : float_unary_cases())
    for (const Shape& shape : shapes()) {
      Tensor x = random(shape, dtype, ++seed, c.low, c.high);
      Tensor expected = c.op(x);
      for (const auto& [layout, input] : layouts(x))
        expect_close(c.op(gpu(input)), expected, tolerance(dtype),
                     std::string(c.name) + " " + layout + " " + ::testing::PrintToString(shape.vec()));
    }
}

std::vector<std::pair<const char*, Binary>> float_binary_cases() {
  return {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.7); }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b, 1.3); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a) + 0.1, b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
      {"lerp", [](const Tensor& a, const Tensor& b) { return lerp(a, b, 0.3); }},
      {"scalar_ops", [](const Tensor& a, const Tensor& b) { return (2.0 - a) / 3.0 + 1.5 * b - a / 0.5; }},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return a < b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return a >= b; }},
      {"where", [](const Tensor& a, const Tensor& b) { return where(a > 0.0, a, b); }},
      {"masked_fill", [](const Tensor& a, const Tensor& b) { return masked_fill(a + b * 0.0, b < 0.0, 0.25); }},
  };
}

// Pairs of shapes that broadcast: equal, row, column and both, scalar.
std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  return {{{37, 41}, {37, 41}}, {{37, 41}, {41}}, {{37, 1}, {1, 41}}, {{37, 41}, {}}, {{}, {5, 3}},
          {{4, 1, 6}, {3, 1}},  {{2, 3, 1029}, {2, 3, 1029}}};
}

TEST_P(CudaFloatOps, BinaryOpsBroadcastAndMatchTheCpuInEveryLayout) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 200;
  for (const auto& [name, op] : float_binary_cases())
    for (const auto& [shape_a, shape_b] : broadcast_pairs()) {
      Tensor a = random(shape_a, dtype, ++seed, -2, 2);
      Tensor b = random(shape_b, dtype, ++seed, -2, 2);
      if (std::string(name) == "eq") {  // few distinct values, so that some are equal
        a = (a * 2.0).to(kInt64).to(dtype);
        b = (b * 2.0).to(kInt64).to(dtype);
      }
      Tensor expected = op(a, b);
      for (const auto& [layout_a, in_a] : layouts(a))
        for (const auto& [layout_b, in_b] : layouts(b)) {
          Tensor got = op(gpu(in_a), gpu(in_b));
          const std::string what = std::string(name) + " " + layout_a + "/" + layout_b + " " +
                                   ::testing::PrintToString(shape_a.vec()) + " with " +
                                   ::testing::PrintToString(shape_b.vec());
          if (expected.dtype() == kBool)
            expect_equal(got, expected, what);
          else
            expect_close(got, expected, tolerance(dtype), what);
        }
    }
}

TEST_P(CudaFloatOps, TernaryAndInPlaceOpsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({37, 41}, dtype, 1), a = random({37, 41}, dtype, 2), b = random({41}, dtype, 3, 0.5, 2);
  auto run = [&](const Tensor& x0, const Tensor& a0, const Tensor& b0) {
    NoGradGuard no_grad;
    Tensor y = x0.clone();
    y.addcmul_(a0, b0, 0.3);
    y.addcdiv_(a0, b0, -0.2);
    y.lerp_(a0, 0.25);
    y.mul_(b0).add_(a0, 2.0).add_(-0.5).div_(b0);
    y.clamp_(-3, 3);
    y.masked_fill_(a0 > 1.5, 7.0);
    Tensor z = y.abs();
    z.sqrt_();
    return z;
  };
  Tensor expected = run(x, a, b);
  expect_close(run(gpu(x), gpu(a), gpu(b)), expected, tolerance(dtype), "in-place chain, contiguous");
  expect_close(run(gpu(x), non_contiguous(gpu(a)), gpu(b)), expected, tolerance(dtype),
               "in-place chain, strided operand");
  // Writing through a strided view of a larger tensor.
  Tensor target = zeros({37, 82}, {.dtype = dtype, .device = testing::gpu_device()});
  Tensor view = target.slice(1, 0, 82, 2);
  {
    NoGradGuard no_grad;
    view.copy_(gpu(x));
    view.mul_(gpu(b)).add_(1.0);
  }
  expect_close(view.contiguous(), x * b + 1.0, tolerance(dtype), "in-place through a strided view");
  EXPECT_EQ(sum(target.slice(1, 1, 82, 2)).item(), 0.0) << "wrote outside the view";
}

// The columns of one head of a (rows, 3 x 40) projection, as a narrow view
// (the rows kernel: contiguous rows, strided between them), written with no
// input, one and three, and read; nothing outside the view changes. The
// extra column puts most rows' starts off 16-byte boundaries.
TEST_P(CudaFloatOps, OpsOnTheRowsOfAWiderTensor) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor x = random({300, 40}, dtype, 4), y = random({300, 40}, dtype, 5), m = random({300, 40}, dtype, 6);
  Tensor wide = full({300, 3 * 40 + 1}, -7.0, {.dtype = dtype, .device = testing::gpu_device()});
  Tensor head = wide.narrow(1, 41, 40);
  {
    NoGradGuard no_grad;
    head.fill_(2.0);
    expect_close(head.contiguous(), full({300, 40}, 2.0, {.dtype = dtype}), 0, "fill of the rows");
    head.copy_(gpu(x));
    head.addcmul_(gpu(y), gpu(m), 0.5);
  }
  const Tensor expected = x + y * m * 0.5;
  expect_close(head.contiguous(), expected, tolerance(dtype), "rows written through a view");
  expect_close(exp(head), exp(expected), tolerance(dtype), "rows read through a view");
  for (const Tensor& outside : {wide.narrow(1, 0, 41), wide.narrow(1, 81, 40)}) {
    EXPECT_EQ(amax(outside).item(), -7.0) << "wrote outside the view";
    EXPECT_EQ(amin(outside).item(), -7.0) << "wrote outside the view";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaFloatOps, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

TEST(CudaIntegerOps, NumericOpsOnIntegersMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  for (DType dtype : {kInt64, kUInt8}) {
    const double low = dtype == kUInt8 ? 0 : -50, high = dtype == kUInt8 ? 250 : 50;
    Tensor a = random({37, 41}, kFloat64, 7, low, high).to(dtype);
    Tensor b = random({41}, kFloat64, 8, 1, dtype == kUInt8 ? 5 : 50).to(dtype);
    const std::vector<std::pair<const char*, Unary>> unary = {
        {"neg", [](const Tensor& x) { return -x; }},
        {"abs", [](const Tensor& x) { return abs(x); }},
        {"square", [](const Tensor& x) { return square(x); }},
        {"sign", [](const Tensor& x) { return sign(x); }},
        {"clamp", [](const Tensor& x) { return clamp(x, 3, 40); }},
        {"relu", [](const Tensor& x) { return relu(x); }},
    };
    for (const auto& [name, op] : unary)
      for (const auto& [layout, input] : layouts(a))
        expect_equal(op(gpu(input)), op(a), std::string(name) + " " + dtype_name(dtype) + " " + layout);
    const std::vector<std::pair<const char*, Binary>> binary = {
        {"add", [](const Tensor& x, const Tensor& y) { return add(x, y, 3); }},
        {"sub", [](const Tensor& x, const Tensor& y) { return x - y; }},
        {"mul", [](const Tensor& x, const Tensor& y) { return x * y; }},
        {"maximum", [](const Tensor& x, const Tensor& y) { return maximum(x, y); }},
        {"minimum", [](const Tensor& x, const Tensor& y) { return minimum(x, y); }},
        {"ne", [](const Tensor& x, const Tensor& y) { return x != y; }},
        {"le", [](const Tensor& x, const Tensor& y) { return x <= y; }},
        {"gt", [](const Tensor& x, const Tensor& y) { return x > y; }},
        {"div_true", [](const Tensor& x, const Tensor& y) { return x / y; }},  // integers divide into float32
    };
    for (const auto& [name, op] : binary)
      for (const auto& [layout, input] : layouts(a)) {
        Tensor got = op(gpu(input), gpu(b)), expected = op(a, b);
        if (expected.dtype() == kFloat32)
          expect_close(got, expected, 1e-6, std::string(name) + " " + dtype_name(dtype) + " " + layout);
        else
          expect_equal(got, expected, std::string(name) + " " + dtype_name(dtype) + " " + layout);
      }
  }
}

TEST(CudaBoolOps, LogicAndComparisonsOfBools) {
  LOOM_REQUIRE_CUDA();
  Tensor a = random({37, 41}, kFloat32, 9) > 0.0, b = random({41}, kFloat32, 10) > 0.5;
  expect_equal(logical_and(gpu(a), gpu(b)), logical_and(a, b), "logical_and");
  expect_equal(logical_or(gpu(a), non_contiguous(gpu(b))), logical_or(a, b), "logical_or");
  expect_equal(logical_not(non_contiguous(gpu(a))), logical_not(a), "logical_not");
  expect_equal(eq(gpu(a), gpu(b)), eq(a, b), "eq on bools");
  expect_equal(where(gpu(a), gpu(b), logical_not(gpu(b))), where(a, b, logical_not(b)), "where on bools");
}

TEST(CudaConversions, EveryDtypePairInEveryLayout) {
  LOOM_REQUIRE_CUDA();
  const std::vector<DType> dtypes = {kBool, kUInt8, kInt64, kFloat32, kFloat64};
  // Values every dtype can hold exactly after truncation: 0..200 and halves.
  Tensor base = (random({37, 41}, kFloat64, 11, 0, 200) * 2.0).to(kInt64).to(kFloat64) / 2.0;
  for (DType from : dtypes) {
    Tensor x = base.to(from);
    for (DType to : dtypes)
      for (const auto& [layout, input] : layouts(x))
        expect_equal(gpu(input).to(to), x.to(to),
                     std::string(dtype_name(from)) + " -> " + dtype_name(to) + " " + layout);
  }
}

// NaN as the CPU (and PyTorch) treat it: maximum and minimum return it from
// either side, relu keeps it, relu's gradient is 0 where the output is <= 0.
TEST(CudaNaN, MaximumMinimumAndReluPropagateItAsTheCpu) {
  LOOM_REQUIRE_CUDA();
  const float nan = NAN;
  Tensor a = from_vector<float>({nan, 1, 2, nan, -1, 0}), b = from_vector<float>({1, nan, 3, nan, 0, -1});
  expect_close(maximum(gpu(a), gpu(b)), maximum(a, b), 0, "maximum");
  expect_close(minimum(gpu(a), gpu(b)), minimum(a, b), 0, "minimum");
  expect_close(relu(gpu(a)), relu(a), 0, "relu");
  auto relu_grad = [&](const Tensor& x, const Tensor& dy) {
    Tensor leaf = x.detach().requires_grad_(true);
    relu(leaf).backward(dy);
    return leaf.grad();
  };
  expect_close(relu_grad(gpu(a), gpu(b)), relu_grad(a, b), 0, "relu gradient");
  EXPECT_TRUE(std::isnan(maximum(gpu(a), gpu(b)).to(Device::cpu()).to_vector<float>()[1]));  // not a vacuous match
}

// Negative floats reach uint8 through int64 (wrapping), as on the CPU.
TEST(CudaConversions, NegativeFloatsToUint8WrapAsOnTheCpu) {
  LOOM_REQUIRE_CUDA();
  Tensor x = from_vector<float>({-1, -2.5, 300, 255.9, 7});
  expect_equal(gpu(x).to(kUInt8), x.to(kUInt8), "float -> uint8");
  expect_equal(gpu(x.to(kFloat64)).to(kUInt8), x.to(kFloat64).to(kUInt8), "double -> uint8");
  expect_equal(full({3}, -3.0, {.dtype = kUInt8, .device = testing::gpu_device()}), full({3}, -3.0, {.dtype = kUInt8}),
               "fill");
}

TEST(CudaCreation, FillArangeAndFull) {
  LOOM_REQUIRE_CUDA();
  const TensorOptions on_gpu = {.device = testing::gpu_device()};
  for (DType dtype : {kBool, kUInt8, kInt64, kFloat32, kFloat64}) {
    TensorOptions o = on_gpu;
    o.dtype = dtype;
    expect_equal(full({3, 1029}, 1.0, o), full({3, 1029}, 1.0, {.dtype = dtype}), "full");
    expect_equal(zeros({5}, o), zeros({5}, {.dtype = dtype}), "zeros");
  }
  for (DType dtype : {kUInt8, kInt64, kFloat32, kFloat64}) {
    TensorOptions o = on_gpu;
    o.dtype = dtype;
    expect_equal(arange(3, 200, 7, o), arange(3, 200, 7, {.dtype = dtype}), "arange");
  }
  expect_close(arange(-1.5, 2.5, 0.25, on_gpu), arange(-1.5, 2.5, 0.25), 0, "fractional arange");
  Tensor t = zeros({4, 6}, on_gpu), c = zeros({4, 6});
  t.narrow(1, 2, 3).fill_(5);
  c.narrow(1, 2, 3).fill_(5);
  expect_equal(t, c, "fill_ through a view");
}

TEST(CudaLargeTensors, ThreadsLoopOverMoreElementsThanTheGridHas) {
  LOOM_REQUIRE_CUDA();
  // 2^24 + 3 elements: more than the capped grid covers in one pass, with a tail.
  const int64_t n = (int64_t{1} << 24) + 3;
  Tensor a = random({n}, kFloat32, 12), b = random({n}, kFloat32, 13);
  expect_close(gpu(a) + gpu(b), a + b, 1e-6, "large add");
  expect_close(exp(non_contiguous(gpu(a))), exp(a), 1e-5, "large strided exp");
  expect_close(gpu(a) * 3.0, a * 3.0, 1e-6, "large add with a scalar");
}

TEST(CudaDevices, OpsOnTensorsOfDifferentDevicesNameBoth) {
  LOOM_REQUIRE_CUDA();
  Tensor a = zeros({2}), b = zeros({2}, {.device = testing::gpu_device()});
  EXPECT_THROW_MSG(a + b, "add: expected all tensors on the same device, got cpu and cuda:0");
  EXPECT_THROW_MSG(mm(b.reshape({1, 2}), a.reshape({2, 1})), "got cuda:0 and cpu");
  EXPECT_THROW_MSG(where(b > 0.0, a, b), "where: expected all tensors on the same device");
  EXPECT_THROW_MSG(index_select(b, 0, from_vector<int64_t>({0})), "index_select: expected all tensors on the same device");
}

}  // namespace
}  // namespace loom
