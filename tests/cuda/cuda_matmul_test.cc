// Matrix products on the GPU (cuBLAS) against float64 references on the CPU:
// every operand layout cuBLAS takes without a copy (row-major, transposed,
// broadcast batch), the ones that need a copy (a slice with a step), exact
// FP32 by default and TF32 only when asked; addmm's bias row through
// cuBLASLt's epilogue and through the add after cublasGemmEx.
#include <gtest/gtest.h>

#include <string>

#include "tensor/blas_library.h"
#include "tensor/precision.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/tensor/rounding_probe.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::gpu;
using testing::random;

constexpr double kTol = 1e-4;

// The product computed in float64 on the CPU, returned in `dtype`.
Tensor reference(const Tensor& a, const Tensor& b) { return matmul(a.to(kFloat64), b.to(kFloat64)).to(a.dtype()); }

class CudaMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(CudaMatmul, ShapesAndTransposedOperands) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  struct Case {
    Shape a, b;
  };
  const std::vector<Case> cases = {{{1, 1}, {1, 1}},   {{1, 7}, {7, 1}},     {{7, 1}, {1, 5}},
                                   {{37, 41}, {41, 29}}, {{128, 256}, {256, 64}}, {{3, 300}, {300, 2}}};
  uint64_t seed = 500;
  for (const Case& c : cases) {
    Tensor a = random(c.a, dtype, ++seed), b = random(c.b, dtype, ++seed);
    const std::string what = ::testing::PrintToString(c.a.vec()) + " @ " + ::testing::PrintToString(c.b.vec());
    expect_close(mm(gpu(a), gpu(b)), reference(a, b), kTol, "mm " + what);
    // Transposed views of transposed copies: same values, column-major memory.
    Tensor at = gpu(a.t().contiguous()).t(), bt = gpu(b.t().contiguous()).t();
    expect_close(mm(at, gpu(b)), reference(a, b), kTol, "mm A^T-layout " + what);
    expect_close(mm(gpu(a), bt), reference(a, b), kTol, "mm B^T-layout " + what);
    expect_close(mm(at, bt), reference(a, b), kTol, "mm both transposed " + what);
  }
}

TEST_P(CudaMatmul, BatchedBroadcastAndCopiedOperands) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor a = random({4, 17, 23}, dtype, 1), b = random({4, 23, 9}, dtype, 2);
  expect_close(bmm(gpu(a), gpu(b)), reference(a, b), kTol, "bmm");
  expect_close(bmm(gpu(a), gpu(b).transpose(1, 2).contiguous().transpose(1, 2)), reference(a, b), kTol,
               "bmm with a transposed batch");
  Tensor w = random({23, 9}, dtype, 3);
  expect_close(matmul(gpu(a), gpu(w)), reference(a, w), kTol, "matmul folds the batch into M");
  Tensor shared = random({1, 23, 9}, dtype, 4);
  expect_close(matmul(gpu(a), gpu(shared)), reference(a, shared), kTol, "broadcast batch (stride 0)");
  Tensor wide = random({17, 46}, dtype, 5);
  Tensor stepped = wide.slice(1, 0, 46, 2);  // no unit stride: copied before cuBLAS
  expect_close(mm(gpu(wide).slice(1, 0, 46, 2), gpu(w)), reference(stepped, w), kTol, "operand with a step");
  Tensor v = random({23}, dtype, 6);
  expect_close(matmul(gpu(a), gpu(v)), reference(a, v), kTol, "matrix @ vector");
  expect_close(matmul(gpu(v), gpu(w)), reference(v, w), kTol, "vector @ matrix");
}

TEST_P(CudaMatmul, GradientsMatchTheCpu) {
  LOOM_REQUIRE_CUDA();
  const DType dtype = GetParam();
  Tensor a = random({3, 16, 24}, dtype, 7), b = random({24, 8}, dtype, 8), g = random({3, 16, 8}, dtype, 9);
  auto grads = [&](const Tensor& a0, const Tensor& b0, const Tensor& g0) {
    Tensor la = a0.detach().requires_grad_(), lb = b0.detach().requires_grad_();
    matmul(la, lb.t().contiguous().t()).backward(g0);
    return std::make_pair(la.grad(), lb.grad());
  };
  auto [da_cpu, db_cpu] = grads(a, b, g);
  auto [da_gpu, db_gpu] = grads(gpu(a), gpu(b), gpu(g));
  expect_close(da_gpu, da_cpu, kTol, "d a");
  expect_close(db_gpu, db_cpu, kTol, "d b");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMatmul, ::testing::Values(kFloat32, kFloat64),
                         [](const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); });

TEST(CudaMatmulPrecision, Float32IsExactUnlessTf32IsAllowed) {
  LOOM_REQUIRE_CUDA();
  ASSERT_FALSE(allow_tf32()) << "TF32 must be off by default";
  Tensor a = random({512, 1024}, kFloat32, 10), b = random({1024, 256}, kFloat32, 11);
  Tensor exact = matmul(a.to(kFloat64), b.to(kFloat64));
  // FP32 accumulation over 1024 terms whose partial sums reach ~40: ~1e-4
  // at worst (outputs near 0 are measured against 1), however cuBLAS splits
  // the sum. TF32 keeps 10 mantissa bits of each input: errors ~100x larger,
  // which shows that the switch, and only the switch, turns it on.
  const double fp32_error = testing::max_rel_error(mm(gpu(a), gpu(b)).to(kFloat64), exact);
  EXPECT_LT(fp32_error, 3e-4);
  set_allow_tf32(true);
  const double tf32_error = testing::max_rel_error(mm(gpu(a), gpu(b)).to(kFloat64), exact);
  set_allow_tf32(false);
  EXPECT_LT(tf32_error, 1e-1) << "TF32 result far off";
  EXPECT_GT(tf32_error, 10 * fp32_error) << "TF32 was allowed, but the product looks exact";
  RecordProperty("fp32_error", std::to_string(fp32_error));
  RecordProperty("tf32_error", std::to_string(tf32_error));
  std::cout << "matmul max rel error vs float64: fp32 " << fp32_error << ", tf32 " << tf32_error << "\n";
}

// Sets the preferred BLAS library for one scope and restores the one it found.
class PreferBlas {
 public:
  explicit PreferBlas(BlasLibrary library) : saved_(preferred_blas_library()) { set_preferred_blas_library(library); }
  ~PreferBlas() { set_preferred_blas_library(saved_); }

 private:
  BlasLibrary saved_;
};

// addmm (a Linear's product and bias) with either library, in the four
// dtypes and the operand layouts a Linear meets (x @ weight.t()), against the
// CPU in float64.
TEST(CudaAddmm, BothBlasLibrariesAddTheBiasRow) {
  LOOM_REQUIRE_CUDA();
  ASSERT_EQ(preferred_blas_library(), BlasLibrary::kCublasLt) << "cuBLASLt is the default (tensor/blas_library.h)";
  struct Case {
    int64_t m, k, n;
  };
  const std::vector<Case> cases = {{1, 1, 1}, {37, 41, 29}, {3, 300, 2}, {512, 384, 1152}};
  for (BlasLibrary library : {BlasLibrary::kCublas, BlasLibrary::kCublasLt}) {
    PreferBlas prefer(library);
    for (DType dtype : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
      const double tol = dtype == kBFloat16 ? 1e-2 : dtype == kFloat16 ? 2e-3 : dtype == kFloat32 ? 1e-4 : 1e-10;
      uint64_t seed = 900;
      for (const Case& c : cases) {
        Tensor x = random({c.m, c.k}, dtype, ++seed), weight = random({c.n, c.k}, dtype, ++seed);
        Tensor bias = random({c.n}, dtype, ++seed);
        const Tensor expected = addmm(bias.to(kFloat64), x.to(kFloat64), weight.to(kFloat64).t()).to(dtype);
        const std::string what = std::string(blas_library_name(library)) + " " + dtype_name(dtype) + " " +
                                 std::to_string(c.m) + "x" + std::to_string(c.k) + "x" + std::to_string(c.n);
        expect_close(addmm(gpu(bias), gpu(x), gpu(weight).t()), expected, tol, what + " x @ weight.t()");
        expect_close(addmm(gpu(bias), gpu(x.t().contiguous()).t(), gpu(weight.t().contiguous())), expected, tol,
                     what + " transposed x, contiguous weight^T");
      }
    }
  }
}

// Which path ran shows in 16-bit rounding (tests/tensor/rounding_probe.h):
// cuBLASLt adds the bias in its epilogue, in float, and rounds once, as the
// CPU does; after cublasGemmEx the add rounds a second time. So this fails
// if cuBLASLt found no algorithm and fell back unseen, or if the switch does
// nothing.
TEST(CudaAddmm, CublasLtAddsTheBiasBeforeTheOneRounding) {
  LOOM_REQUIRE_CUDA();
  for (DType dtype : {kBFloat16, kFloat16}) {
    const testing::RoundingProbe p = testing::rounding_probe(dtype, 64);
    const Tensor once = full({64, 64}, p.rounded_once, {.dtype = dtype});
    const Tensor twice = full({64, 64}, p.rounded_twice, {.dtype = dtype});
    testing::expect_equal(addmm(p.bias, p.a, p.b), once, std::string("CPU ") + dtype_name(dtype));
    {
      PreferBlas prefer(BlasLibrary::kCublasLt);
      testing::expect_equal(addmm(gpu(p.bias), gpu(p.a), gpu(p.b)).cpu(), once,
                            std::string("cublaslt ") + dtype_name(dtype));
    }
    PreferBlas prefer(BlasLibrary::kCublas);
    testing::expect_equal(addmm(gpu(p.bias), gpu(p.a), gpu(p.b)).cpu(), twice,
                          std::string("cublas ") + dtype_name(dtype));
  }
}

}  // namespace
}  // namespace loom
