// Random draws on the GPU equal the CPU's for the same generator state: both
// compute element i of a draw from (seed, offset, i) with tensor/random_draw.h.
// Uniform, randint and bernoulli draws are bit-identical; normal draws may
// differ in the last bit of float64, where CUDA's and glibc's log and cos do.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::expect_equal;

const TensorOptions& on(DType dtype, bool gpu) {
  static TensorOptions options[5][2];
  TensorOptions& o = options[static_cast<int>(dtype)][gpu];
  o.dtype = dtype;
  o.device = gpu ? testing::gpu_device() : Device::cpu();
  return o;
}

TEST(CudaRandom, SameSeedSameNumbersAsTheCpu) {
  LOOM_REQUIRE_CUDA();
  const Shape shape{1000, 37};  // more elements than one block, an odd tail
  for (DType dtype : {kFloat32, kFloat64}) {
    const std::string name = dtype_name(dtype);
    Generator c(42), g(42);
    expect_equal(rand(shape, on(dtype, true), &g), rand(shape, on(dtype, false), &c), "rand " + name);
    expect_equal(uniform(shape, -3, 5, on(dtype, true), &g), uniform(shape, -3, 5, on(dtype, false), &c),
                 "uniform " + name);
    expect_close(randn(shape, on(dtype, true), &g), randn(shape, on(dtype, false), &c), 1e-12, "randn " + name);
    expect_close(normal(shape, 2, 0.5, on(dtype, true), &g), normal(shape, 2, 0.5, on(dtype, false), &c), 1e-12,
                 "normal " + name);
    expect_equal(bernoulli(shape, 0.3, on(dtype, true), &g), bernoulli(shape, 0.3, on(dtype, false), &c),
                 "bernoulli " + name);
  }
  for (DType dtype : {kInt64, kUInt8, kBool, kFloat32}) {
    Generator c(7), g(7);
    expect_equal(randint(0, 2, {5000}, on(dtype, true), &g), randint(0, 2, {5000}, on(dtype, false), &c),
                 std::string("randint ") + dtype_name(dtype));
  }
  Generator c(9), g(9);
  expect_equal(randint(-1000000, 1000000, {4096}, on(kInt64, true), &g),
               randint(-1000000, 1000000, {4096}, on(kInt64, false), &c), "randint wide range");
}

TEST(CudaRandom, TheDefaultGeneratorAdvancesTheSameWayOnBothDevices) {
  LOOM_REQUIRE_CUDA();
  manual_seed(123);
  Tensor a = randn({64}, {.device = testing::gpu_device()});
  Tensor b = randn({64});
  manual_seed(123);
  Tensor a_cpu = randn({64});
  Tensor b_gpu = randn({64}, {.device = testing::gpu_device()});
  expect_close(a, a_cpu, 1e-6, "first draw");
  expect_close(b_gpu, b, 1e-6, "second draw");
}

TEST(CudaRandom, DistributionsOnTheGpu) {
  LOOM_REQUIRE_CUDA();
  Generator gen(17);
  const int64_t n = 1 << 20;
  Tensor u = uniform({n}, -2, 3, on(kFloat64, true), &gen);
  EXPECT_GE(amin(u).item(), -2);
  EXPECT_LT(amax(u).item(), 3);
  EXPECT_NEAR(mean(u).item(), 0.5, 0.01);
  Tensor z = normal({n}, 1.0, 2.0, on(kFloat64, true), &gen);
  EXPECT_NEAR(mean(z).item(), 1.0, 0.01);
  EXPECT_NEAR(std::sqrt(var(z).item()), 2.0, 0.01);
}

}  // namespace
}  // namespace loom
