// Element types of a tensor, their sizes, names and promotion rules.
//
//   DType t = promote_types(kInt64, kFloat32);   // kFloat32, as in PyTorch
//   dispatch_floating(t, "tanh", [&](auto tag) { using T = decltype(tag); ... });
#pragma once

#include <cstdint>
#include <ostream>

#include "tensor/error.h"

namespace loom {

enum class DType : uint8_t { Bool, UInt8, Int64, Float32, Float64 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;

size_t element_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32", as PyTorch prints it
std::ostream& operator<<(std::ostream& out, DType dtype);

inline bool is_floating(DType dtype) { return dtype == kFloat32 || dtype == kFloat64; }
inline bool is_integral(DType dtype) { return dtype == kUInt8 || dtype == kInt64; }

// The type both operands of a binary op are computed in:
// bool < uint8 < int64 < float32 < float64.
DType promote_types(DType a, DType b);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return kBool; }
template <> constexpr DType dtype_of<uint8_t>() { return kUInt8; }
template <> constexpr DType dtype_of<int64_t>() { return kInt64; }
template <> constexpr DType dtype_of<float>() { return kFloat32; }
template <> constexpr DType dtype_of<double>() { return kFloat64; }

// Calls fn(T{}) with the C++ type of `dtype`; `op` names the caller in errors.
template <typename F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kFloat32: return fn(float{});
    case kFloat64: return fn(double{});
    default: LOOM_FAIL(op, ": expected a floating-point tensor (float32 or float64), got ", dtype);
  }
}

template <typename F>
decltype(auto) dispatch_numeric(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kUInt8: return fn(uint8_t{});
    case kInt64: return fn(int64_t{});
    case kFloat32: return fn(float{});
    case kFloat64: return fn(double{});
    default: LOOM_FAIL(op, ": not supported for ", dtype, " tensors");
  }
}

template <typename F>
decltype(auto) dispatch_all(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kBool: return fn(bool{});
    case kUInt8: return fn(uint8_t{});
    case kInt64: return fn(int64_t{});
    case kFloat32: return fn(float{});
    case kFloat64: return fn(double{});
  }
  LOOM_FAIL(op, ": unknown dtype ", static_cast<int>(dtype));
}

}  // namespace loom
