#include "tensor/shape.h"

#include "tensor/error.h"

namespace loom {

Dims::Dims(std::initializer_list<int64_t> values) {
  for (int64_t v : values) push_back(v);
}

Dims::Dims(const std::vector<int64_t>& values) {
  for (int64_t v : values) push_back(v);
}

Dims Dims::filled(int size, int64_t value) {
  Dims d;
  for (int i = 0; i < size; ++i) d.push_back(value);
  return d;
}

void Dims::push_back(int64_t value) {
  LOOM_CHECK(size_ < kMaxDims, "loom tensors have at most ", kMaxDims, " dimensions");
  values_[size_++] = value;
}

void Dims::insert(int index, int64_t value) {
  LOOM_CHECK(size_ < kMaxDims, "loom tensors have at most ", kMaxDims, " dimensions");
  LOOM_INTERNAL_ASSERT(index >= 0 && index <= size_);
  for (int i = size_; i > index; --i) values_[i] = values_[i - 1];
  values_[index] = value;
  ++size_;
}

void Dims::erase(int index) {
  LOOM_INTERNAL_ASSERT(index >= 0 && index < size_);
  for (int i = index; i + 1 < size_; ++i) values_[i] = values_[i + 1];
  --size_;
}

bool Dims::operator==(const Dims& o) const {
  if (size_ != o.size_) return false;
  for (int i = 0; i < size_; ++i)
    if (values_[i] != o.values_[i]) return false;
  return true;
}

std::ostream& operator<<(std::ostream& out, const Dims& dims) {
  out << '[';
  for (int i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  return out << ']';
}

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    LOOM_CHECK(!__builtin_mul_overflow(n, s, &n), "shape ", shape, " has more elements than fit in 64 bits");
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides = Dims::filled(shape.size(), 1);
  for (int i = shape.size() - 2; i >= 0; --i)
    LOOM_CHECK(!__builtin_mul_overflow(strides[i + 1], std::max<int64_t>(shape[i + 1], 1), &strides[i]), "shape ",
               shape, " is too large: its strides do not fit in 64 bits");
  return strides;
}

bool is_contiguous(const Shape& shape, const Strides& strides) {
  int64_t expected = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;  // a size-1 dim may have any stride
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

int wrap_dim(int64_t dim, int ndim, const char* op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  LOOM_CHECK(dim >= lo && dim <= hi, op, ": dimension ", dim,
             " is out of range for a tensor of ", ndim, " dimensions (expected ", lo, " to ",
             hi, ")");
  return static_cast<int>(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int n = std::max(a.size(), b.size());
  Shape out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    LOOM_CHECK(sa == sb || sa == 1 || sb == 1, op, ": shapes ", a, " and ", b,
               " do not broadcast (dimension ", i, ": ", sa, " vs ", sb, ")");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const int lead = to.size() - from.size();
  for (int i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[lead + i]) return false;
  return true;
}

Shape infer_shape(const std::vector<int64_t>& requested, int64_t total, const char* op) {
  Shape shape(requested);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LOOM_CHECK(infer < 0, op, ": only one dimension can be -1, got ", shape);
      infer = i;
    } else {
      LOOM_CHECK(shape[i] >= 0, op, ": invalid size ", shape[i], " in shape ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    LOOM_CHECK(known != 0 && total % known == 0, op, ": shape ", shape,
               " is invalid for a tensor of ", total, " elements");
    shape[infer] = total / known;
  }
  LOOM_CHECK(numel(shape) == total, op, ": shape ", shape, " is invalid for a tensor of ",
             total, " elements");
  return shape;
}

}  // namespace loom
