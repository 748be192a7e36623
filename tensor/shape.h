// Shapes and strides: small fixed-capacity vectors of int64 (no heap), and the
// index arithmetic every op shares (broadcasting, dim wrapping, contiguity).
//
//   Shape s{2, 3, 4};
//   Strides st = contiguous_strides(s);           // {12, 4, 1}
//   Shape b = broadcast_shapes({3, 1}, {4}, "add"); // {3, 4}
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <vector>

namespace loom {

inline constexpr int kMaxDims = 8;

// A vector of at most kMaxDims int64s, stored inline.
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values);
  explicit Dims(const std::vector<int64_t>& values);
  static Dims filled(int size, int64_t value);

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](int i) const { return values_[i]; }
  int64_t& operator[](int i) { return values_[i]; }
  int64_t back() const { return values_[size_ - 1]; }
  const int64_t* begin() const { return values_.data(); }
  const int64_t* end() const { return values_.data() + size_; }
  int64_t* begin() { return values_.data(); }
  int64_t* end() { return values_.data() + size_; }

  void push_back(int64_t value);
  void insert(int index, int64_t value);
  void erase(int index);
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  bool operator==(const Dims& o) const;
  bool operator!=(const Dims& o) const { return !(*this == o); }

 private:
  std::array<int64_t, kMaxDims> values_{};
  int size_ = 0;
};

using Shape = Dims;    // sizes of each dimension
using Strides = Dims;  // elements to step in storage per index of each dimension

std::ostream& operator<<(std::ostream& out, const Dims& dims);  // [2, 3]

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
bool is_contiguous(const Shape& shape, const Strides& strides);

// Wraps a possibly negative dim into [0, ndim); `op` names the caller in errors.
int wrap_dim(int64_t dim, int ndim, const char* op);

// NumPy broadcasting of two shapes; throws naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Whether `from` broadcasts to exactly `to` (as an in-place op's operand must).
bool broadcasts_to(const Shape& from, const Shape& to);

// Validates a shape given by the user (no negative sizes) and at most one -1,
// which it infers from `total` (reshape/view).
Shape infer_shape(const std::vector<int64_t>& requested, int64_t total, const char* op);

}  // namespace loom
