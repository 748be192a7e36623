#include "tensor/creation.h"

#include <cmath>

#include "tensor/backend.h"

namespace loom {
namespace {

Tensor finish(Tensor t, const TensorOptions& options) {
  if (options.requires_grad) t.requires_grad_(true);
  return t;
}

Tensor random_tensor(RandomOp op, const Shape& shape, double a, double b,
                     const TensorOptions& options, Generator* generator) {
  Generator& gen = generator ? *generator : default_generator();
  Tensor t = empty(shape, options);
  const Draw d = gen.draw();
  backend_for(t.device()).random(op, t, a, b, d);
  return finish(t, options);
}

size_t checked_nbytes(const char* op, const Shape& shape, DType dtype) {
  int64_t bytes = static_cast<int64_t>(element_size(dtype));
  for (int64_t s : shape) {
    LOOM_CHECK(s >= 0, op, ": negative size in shape ", shape);
    LOOM_CHECK(!__builtin_mul_overflow(bytes, s, &bytes), op, ": shape ", shape, " of ", dtype,
               " needs more bytes than fit in 64 bits");
  }
  return static_cast<size_t>(bytes);
}

// The allocator of pinned host memory, if a GPU backend can provide it.
Allocator* pinned_allocator() {
  if (!has_backend(DeviceType::CUDA) || !cuda_available()) return nullptr;
  return backend_for(DeviceType::CUDA).pinned_host_allocator();
}

}  // namespace

Tensor empty(const Shape& shape, const TensorOptions& options) {
  size_t bytes = checked_nbytes("empty", shape, options.dtype);
  auto storage = std::make_shared<Storage>(bytes, options.device);
  return finish(make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, options.dtype),
                options);
}

Tensor empty_pinned(const Shape& shape, const TensorOptions& options) {
  LOOM_CHECK(options.device.is_cpu(), "empty_pinned: pinned memory is host memory, but device ",
             options.device, " was asked for");
  Allocator* pinned = pinned_allocator();
  if (pinned == nullptr) return empty(shape, options);
  size_t bytes = checked_nbytes("empty_pinned", shape, options.dtype);
  auto storage = std::make_shared<Storage>(bytes, Device::cpu(), *pinned);
  return finish(make_tensor(std::move(storage), shape, contiguous_strides(shape), 0, options.dtype),
                options);
}

bool is_pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu()) return false;
  Allocator* pinned = pinned_allocator();
  return pinned != nullptr && t.storage()->allocator() == pinned;
}

Tensor full(const Shape& shape, double value, const TensorOptions& options) {
  TensorOptions plain = options;
  plain.requires_grad = false;
  Tensor t = empty(shape, plain);
  if (t.numel() > 0) backend_for(t.device()).fill(t, value);
  return finish(t, options);
}

Tensor zeros(const Shape& shape, const TensorOptions& options) { return full(shape, 0, options); }
Tensor ones(const Shape& shape, const TensorOptions& options) { return full(shape, 1, options); }
Tensor scalar_tensor(double value, const TensorOptions& options) { return full({}, value, options); }

Tensor arange(double start, double end, double step, const TensorOptions& options) {
  LOOM_CHECK(step != 0, "arange: step must be nonzero");
  LOOM_CHECK((end - start) / step >= 0, "arange: the range [", start, ", ", end,
             ") is empty or goes the wrong way for step ", step);
  auto count = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({count}, options);
  if (count > 0) backend_for(t.device()).arange(t, start, step);
  return t;
}

Tensor arange(int64_t end, const TensorOptions& options) {
  return arange(0.0, static_cast<double>(end), 1.0, options);
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, double value) { return full(t.shape(), value, t.options()); }

template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, const TensorOptions& options) {
  LOOM_CHECK(static_cast<int64_t>(values.size()) == numel(shape), "from_vector: ", values.size(),
             " values do not fill shape ", shape);
  // Wrap the host values, then copy (converting dtype, moving device).
  auto host = std::make_shared<Storage>(sizeof(T) * values.size(), Device::cpu());
  T* p = static_cast<T*>(host->data());
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  Tensor src = make_tensor(host, shape, contiguous_strides(shape), 0, dtype_of<T>());
  TensorOptions plain = options;
  plain.requires_grad = false;
  Tensor t = empty(shape, plain);
  copy_data(src, t);
  return finish(t, options);
}

template Tensor from_vector(const std::vector<bool>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<float>&, const Shape&, const TensorOptions&);
template Tensor from_vector(const std::vector<double>&, const Shape&, const TensorOptions&);

Tensor rand(const Shape& shape, const TensorOptions& options, Generator* generator) {
  return random_tensor(RandomOp::Uniform, shape, 0, 1, options, generator);
}
Tensor randn(const Shape& shape, const TensorOptions& options, Generator* generator) {
  return random_tensor(RandomOp::Normal, shape, 0, 1, options, generator);
}
Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options,
               Generator* generator) {
  LOOM_CHECK(low <= high, "uniform: low ", low, " is above high ", high);
  return random_tensor(RandomOp::Uniform, shape, low, high, options, generator);
}
Tensor normal(const Shape& shape, double mean, double stddev, const TensorOptions& options,
              Generator* generator) {
  LOOM_CHECK(stddev >= 0, "normal: stddev must be non-negative, got ", stddev);
  return random_tensor(RandomOp::Normal, shape, mean, stddev, options, generator);
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, const TensorOptions& options,
               Generator* generator) {
  LOOM_CHECK(low < high, "randint: empty range [", low, ", ", high, ")");
  return random_tensor(RandomOp::RandInt, shape, static_cast<double>(low),
                       static_cast<double>(high), options, generator);
}
Tensor bernoulli(const Shape& shape, double p, const TensorOptions& options, Generator* generator) {
  LOOM_CHECK(p >= 0 && p <= 1, "bernoulli: p must be in [0, 1], got ", p);
  return random_tensor(RandomOp::Bernoulli, shape, p, 0, options, generator);
}

Tensor randperm(int64_t n, Generator* generator) {
  LOOM_CHECK(n >= 0, "randperm: n must be non-negative, got ", n);
  Generator& gen = generator ? *generator : default_generator();
  Tensor t = arange(n);
  int64_t* p = t.data_ptr<int64_t>();
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[gen.next_u64() % static_cast<uint64_t>(i + 1)]);
  return t;
}

Tensor contiguous_copy(const Tensor& t) {
  Tensor out = empty(t.shape(), t.options());
  copy_data(t, out);
  return out;
}

}  // namespace loom
