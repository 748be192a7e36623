// Element types of a tensor, their sizes, names and promotion rules.
//
//   DType t = promote_types(kInt64, kFloat32);   // kFloat32, as in PyTorch
//   dispatch_floating(t, "tanh", [&](auto tag) { using T = decltype(tag); ... });
#pragma once

#include <cstdint>
#include <ostream>
#include <utility>

#include "tensor/error.h"
#include "tensor/half.h"

namespace loom {

// The 16-bit floats come last so that the existing values keep their numbers.
enum class DType : uint8_t { Bool, UInt8, Int64, Float32, Float64, BFloat16, Float16 };

inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat16 = DType::Float16;

size_t element_size(DType dtype);
const char* dtype_name(DType dtype);  // "float32", as PyTorch prints it
std::ostream& operator<<(std::ostream& out, DType dtype);

inline bool is_floating(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kBFloat16 || dtype == kFloat16;
}
inline bool is_16bit_floating(DType dtype) { return dtype == kBFloat16 || dtype == kFloat16; }
inline bool is_integral(DType dtype) { return dtype == kUInt8 || dtype == kInt64; }

// The type both operands of a binary op are computed in, as PyTorch's:
// bool < uint8 < int64 < bfloat16, float16 < float32 < float64, and
// bfloat16 with float16 gives float32.
DType promote_types(DType a, DType b);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<bool>() { return kBool; }
template <> constexpr DType dtype_of<uint8_t>() { return kUInt8; }
template <> constexpr DType dtype_of<int64_t>() { return kInt64; }
template <> constexpr DType dtype_of<float>() { return kFloat32; }
template <> constexpr DType dtype_of<double>() { return kFloat64; }
template <> constexpr DType dtype_of<BFloat16>() { return kBFloat16; }
template <> constexpr DType dtype_of<Float16>() { return kFloat16; }

// Calls fn(T{}) with the C++ type of `dtype`; `op` names the caller in errors.
template <typename F>
decltype(auto) dispatch_floating(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kFloat32: return fn(float{});
    case kFloat64: return fn(double{});
    default: LOOM_FAIL(op, ": expected a float32 or float64 tensor, got ", dtype,
                       is_16bit_floating(dtype) ? " (this CUDA kernel has no 16-bit version yet; the CPU computes them)" : "");
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
    default: LOOM_FAIL(op, ": not supported for ", dtype, " tensors");
  }
}

// dispatch_all and the 16-bit floats: for code that only stores, moves or
// converts values (copy, fill, reading values out).
template <typename F>
decltype(auto) dispatch_storage(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kBFloat16: return fn(BFloat16{});
    case kFloat16: return fn(Float16{});
    default: return dispatch_all(dtype, op, std::forward<F>(fn));
  }
}

// dispatch_numeric and the 16-bit floats: for code that computes on them in
// compute_type_t (reductions over ranks, the 16-bit all-reduce).
template <typename F>
decltype(auto) dispatch_reducible(DType dtype, const char* op, F&& fn) {
  switch (dtype) {
    case kBFloat16: return fn(BFloat16{});
    case kFloat16: return fn(Float16{});
    default: return dispatch_numeric(dtype, op, std::forward<F>(fn));
  }
}

// The type arithmetic on T is done in: float32 for the 16-bit floats (which
// are rounded once at the end), T itself otherwise.
template <typename T> struct ComputeType { using type = T; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <> struct ComputeType<Float16> { using type = float; };
template <typename T> using compute_type_t = typename ComputeType<T>::type;

}  // namespace loom
