// Helpers for the CUDA tests: moving tensors to the GPU, non-contiguous
// copies, and comparing a GPU result with the CPU's.
//
//   LOOM_REQUIRE_CUDA();                      // skips, with a message, without a GPU
//   Tensor x = random({37, 41}, kFloat32, 1); // on the CPU
//   expect_close(exp(gpu(x)), exp(x), 1e-5, "exp");
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tensor/backend.h"  // synchronize(Device)
#include "tests/test_util.h"

namespace loom::testing {

inline Device gpu_device() { return Device::cuda(0); }
inline Tensor gpu(const Tensor& t) { return t.to(gpu_device()); }

// Uniform values in [low, high) on the CPU, reproducible from `seed`.
inline Tensor random(const Shape& shape, DType dtype, uint64_t seed, double low = -2, double high = 2) {
  Generator g(seed);
  return uniform(shape, low, high, {.dtype = dtype}, &g);
}

// The same values in a non-contiguous layout on t's device: every other
// element of a buffer twice as long in the last dim (no autograd).
inline Tensor non_contiguous(const Tensor& t) {
  NoGradGuard no_grad;
  if (t.dim() == 0) return t;
  std::vector<int64_t> big = t.shape().vec();
  big.back() *= 2;
  Tensor buffer = full(Shape(big), -999, t.options());
  Tensor view = buffer.slice(-1, 0, big.back(), 2);
  view.copy_(t);
  return view;
}

// A GPU result against the CPU's: same shape, max |a - b| / max(1, |b|) under tol.
inline void expect_close(const Tensor& from_gpu, const Tensor& from_cpu, double tol, const std::string& what) {
  ASSERT_TRUE(from_gpu.defined() && from_cpu.defined()) << what << ": undefined result";
  EXPECT_TRUE(from_gpu.device().is_cuda()) << what << ": expected a CUDA result, got " << from_gpu.device();
  EXPECT_EQ(from_gpu.dtype(), from_cpu.dtype()) << what;
  ASSERT_EQ(from_gpu.shape(), from_cpu.shape()) << what;
  EXPECT_LE(max_rel_error(from_gpu, from_cpu), tol) << what;
}

// Exact equality of values (integers, bools, copies).
inline void expect_equal(const Tensor& from_gpu, const Tensor& from_cpu, const std::string& what) {
  ASSERT_EQ(from_gpu.shape(), from_cpu.shape()) << what;
  EXPECT_EQ(from_gpu.dtype(), from_cpu.dtype()) << what;
  EXPECT_EQ(values(from_gpu), values(from_cpu)) << what;
}

}  // namespace loom::testing
