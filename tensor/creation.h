// Creating tensors: uninitialised, filled, ranges, from host data, random.
//
//   Tensor a = zeros({2, 3});                                   // float32 on the CPU
//   Tensor b = full({4}, 1.5, {.dtype = kFloat64});
//   Tensor i = arange(0, 10, 1, {.dtype = kInt64});
//   Tensor x = from_vector<float>({1, 2, 3, 4}, {2, 2});
//   Tensor w = randn({128, 64}, {.requires_grad = true});
//
// None of these records autograd history: their results are leaves.
#pragma once

#include <vector>

#include "tensor/generator.h"
#include "tensor/tensor.h"

namespace loom {

Tensor empty(const Shape& shape, const TensorOptions& options = {});
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
// A 0-dimensional tensor holding `value`.
Tensor scalar_tensor(double value, const TensorOptions& options = {});
// start, start + step, ... up to but not including end.
Tensor arange(double start, double end, double step = 1, const TensorOptions& options = {});
Tensor arange(int64_t end, const TensorOptions& options = {.dtype = kInt64});

// An uninitialised CPU tensor in page-locked (pinned) host memory, from which
// copies to a GPU run asynchronously (the DataLoader's staging buffers). On a
// machine without a usable GPU it is ordinary host memory, so callers need no
// special case. options.device must be the CPU.
Tensor empty_pinned(const Shape& shape, const TensorOptions& options = {});
// Whether t's memory is page-locked (it came from empty_pinned on a GPU machine).
bool is_pinned(const Tensor& t);

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// Copies host values into a new tensor of `shape` (default: 1-D), converting
// to options.dtype and moving to options.device.
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options);
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  return from_vector<T>(values, shape, {.dtype = dtype_of<T>()});
}
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector<T>(values, Shape{static_cast<int64_t>(values.size())});
}

// Random tensors; `generator` defaults to default_generator().
Tensor rand(const Shape& shape, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& shape, const TensorOptions& options = {}, Generator* generator = nullptr);
Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options = {},
               Generator* generator = nullptr);
Tensor normal(const Shape& shape, double mean, double stddev, const TensorOptions& options = {},
              Generator* generator = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape,
               const TensorOptions& options = {.dtype = kInt64}, Generator* generator = nullptr);
// 1 with probability p, else 0, in options.dtype.
Tensor bernoulli(const Shape& shape, double p, const TensorOptions& options = {},
                 Generator* generator = nullptr);
// A random permutation of 0..n-1 (int64, on the CPU), Fisher-Yates on `generator`.
Tensor randperm(int64_t n, Generator* generator = nullptr);

// A contiguous copy of t's data with no autograd history, for kernels.
Tensor contiguous_copy(const Tensor& t);

}  // namespace loom
