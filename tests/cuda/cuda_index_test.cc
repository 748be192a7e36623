// Indexing on the GPU against the CPU backend: index_select / index_add /
// gather / scatter_add along every dim, repeated indices (atomics), every
// dtype they take; and out-of-range indices, which CUDA kernels report at the
// next synchronising call as a loom::Error naming the op.
#include <gtest/gtest.h>

#include <string>

#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::gpu;
using testing::non_contiguous;
using testing::random;

// Indices in [0, size), with repeats.
Tensor random_index(const Shape& shape, int64_t size, uint64_t seed) {
  Generator g(seed);
  return randint(0, size, shape, {.dtype = kInt64}, &g);
}

TEST(CudaIndex, IndexSelectAlongEveryDimAndDtype) {
  LOOM_REQUIRE_CUDA();
  for (DType dtype : {kBool, kUInt8, kInt64, kFloat32, kFloat64}) {
    Tensor x = (random({6, 7, 8}, kFloat64, 1, 0, 100)).to(dtype);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor index = random_index({13}, x.size(dim), 10 + dim);
      expect_equal(index_select(gpu(x), dim, gpu(index)), index_select(x, dim, index),
                   std::string("index_select ") + dtype_name(dtype) + " dim " + std::to_string(dim));
      expect_equal(index_select(non_contiguous(gpu(x)), dim, gpu(index)), index_select(x, dim, index),
                   "index_select of a strided tensor");
    }
  }
  // An embedding lookup: many rows, a wide table.
  Tensor table = random({1000, 256}, kFloat32, 2);
  Tensor tokens = random_index({4096}, 1000, 3);
  expect_equal(index_select(gpu(table), 0, gpu(tokens)), index_select(table, 0, tokens), "embedding lookup");
}

TEST(CudaIndex, IndexAddAccumulatesRepeatedIndices) {
  LOOM_REQUIRE_CUDA();
  for (DType dtype : {kUInt8, kInt64, kFloat32, kFloat64}) {
    Tensor x = random({6, 7, 8}, kFloat64, 4, 0, 10).to(dtype);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor index = random_index({40}, x.size(dim), 20 + dim);  // many repeats
      Shape src_shape = x.shape();
      src_shape[dim] = 40;
      Tensor src = random(src_shape, kFloat64, 30 + dim, 0, 3).to(dtype);
      Tensor got = index_add(gpu(x), dim, gpu(index), gpu(src)), expected = index_add(x, dim, index, src);
      const std::string what = std::string("index_add ") + dtype_name(dtype) + " dim " + std::to_string(dim);
      if (is_floating(dtype))
        expect_close(got, expected, 1e-5, what);
      else
        expect_equal(got, expected, what);
    }
  }
}

TEST(CudaIndex, GatherAndScatterAddAlongEveryDim) {
  LOOM_REQUIRE_CUDA();
  for (DType dtype : {kUInt8, kInt64, kFloat32, kFloat64}) {
    Tensor x = random({5, 6, 7}, kFloat64, 5, 0, 10).to(dtype);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Shape shape{4, 5, 6};  // no larger than x outside dim
      shape[dim] = 9;
      Tensor index = random_index(shape, x.size(dim), 40 + dim);
      const std::string suffix = std::string(" ") + dtype_name(dtype) + " dim " + std::to_string(dim);
      expect_equal(gather(gpu(x), dim, gpu(index)), gather(x, dim, index), "gather" + suffix);
      expect_equal(gather(non_contiguous(gpu(x)), dim, gpu(index)), gather(x, dim, index), "gather strided" + suffix);
      Tensor src = random(shape, kFloat64, 50 + dim, 0, 3).to(dtype);
      Tensor got = scatter_add(gpu(x), dim, gpu(index), gpu(src)), expected = scatter_add(x, dim, index, src);
      if (is_floating(dtype))
        expect_close(got, expected, 1e-5, "scatter_add" + suffix);
      else
        expect_equal(got, expected, "scatter_add" + suffix);
    }
  }
  Tensor logits = random({64, 10}, kFloat32, 6);
  Tensor labels = random_index({64, 1}, 10, 7);
  expect_equal(gather(gpu(logits), 1, gpu(labels)), gather(logits, 1, labels), "picking class scores");
}

// The error surfaces when the host next waits for the GPU: here .cpu().
TEST(CudaIndex, OutOfRangeIndicesAreAClearErrorAtTheNextSynchronisingCall) {
  LOOM_REQUIRE_CUDA();
  Tensor x = gpu(arange(0, 10, 1).reshape({5, 2}));
  EXPECT_THROW_MSG(index_select(x, 0, gpu(from_vector<int64_t>({0, 7}))).cpu(),
                   "index_select: index 7 is out of range for dimension 0 of size 5");
  EXPECT_THROW_MSG(index_select(x, 1, gpu(from_vector<int64_t>({-1}))).cpu(),
                   "index_select: index -1 is out of range for dimension 1 of size 2");
  EXPECT_THROW_MSG(gather(x, 1, gpu(from_vector<int64_t>({0, 2}, {1, 2}))).cpu(),
                   "gather: index 2 is out of range for dimension 1 of size 2");
  EXPECT_THROW_MSG(scatter_add(x, 0, gpu(from_vector<int64_t>({0, 5}, {1, 2})), gpu(ones({1, 2}))).cpu(),
                   "scatter_add: index 5 is out of range for dimension 0 of size 5");
  EXPECT_THROW_MSG(index_add(x, 0, gpu(from_vector<int64_t>({9})), gpu(ones({1, 2}))).cpu(),
                   "index_add: index 9 is out of range for dimension 0 of size 5");
  // Also at an explicit synchronize(), and the message says where it came from.
  Tensor bad = index_select(x, 0, gpu(from_vector<int64_t>({5})));
  EXPECT_THROW_MSG(synchronize(testing::gpu_device()), "found by a CUDA kernel on cuda:0");
  // Once reported, the error is cleared: the next ops work.
  Tensor fine = index_select(x, 0, gpu(from_vector<int64_t>({4, 0})));
  testing::expect_values(fine, {8, 9, 0, 1});
  EXPECT_NO_THROW(synchronize(testing::gpu_device()));
}

}  // namespace
}  // namespace loom
