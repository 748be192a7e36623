// loom's 16-bit floats in CUDA kernels.
//
// On the host, BFloat16 and Float16 (tensor/half.h) hold the bits; on the
// device the same bits are CUDA's __nv_bfloat16 and __half. Kernels compute
// on them in float and round once when they store, as the CPU does (CUDA's
// conversions from float round to nearest even, as loom's do).
//
//   dispatch_floating_or_16bit(t.dtype(), "softmax", [&](auto storage, auto compute) {
//     using S = decltype(storage);  // what memory holds: float, double, __nv_bfloat16, __half
//     using T = decltype(compute);  // what the kernel computes in: S, or float for 16 bits
//   });
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/element_cast.h"

namespace loom::cuda {

template <typename S>
struct ComputeOf {
  using type = S;
};
template <>
struct ComputeOf<__nv_bfloat16> {
  using type = float;
};
template <>
struct ComputeOf<__half> {
  using type = float;
};
template <typename S>
using compute_of_t = typename ComputeOf<S>::type;

// A value as kernels compute with it: 16-bit floats widened to float, the rest as they are.
template <typename S>
__device__ __forceinline__ compute_of_t<S> widen(S x) {
  return static_cast<compute_of_t<S>>(x);
}

// A value of compute type stored as Out (rounded to nearest even for 16 bits).
// Integers and doubles reach the 16-bit types through float, and the rest
// as the CPU casts (tensor/element_cast.h).
template <typename Out, typename T>
__host__ __device__ __forceinline__ Out narrow_to(T x) {
  if constexpr (std::is_same_v<Out, __nv_bfloat16> || std::is_same_v<Out, __half>)
    return Out(static_cast<float>(x));
  else
    return element_cast<Out>(x);
}

// An elementwise functor written for the compute type, run on storage: its
// arguments widened, its result rounded to Out once.
template <typename Out, typename F>
struct OnStorage {
  F f;
  template <typename... A>
  __device__ Out operator()(A... a) const {
    return narrow_to<Out>(f(widen(a)...));
  }
};

template <typename Out, typename F>
OnStorage<Out, F> on_storage(F f) {
  return {f};
}

// The dtype of storage type S.
template <typename S>
constexpr DType storage_dtype() {
  if constexpr (std::is_same_v<S, __nv_bfloat16>) return kBFloat16;
  else if constexpr (std::is_same_v<S, __half>) return kFloat16;
  else return dtype_of<S>();
}

// fn(storage, compute) for `dtype`: the 16-bit floats as their device types
// computed in float; any other dtype through `dispatch` (one of tensor/dtype.h's
// dispatchers), stored and computed as itself.
template <typename Dispatch, typename F>
decltype(auto) with_16bit(DType dtype, Dispatch&& dispatch, F&& fn) {
  switch (dtype) {
    case kBFloat16: return fn(__nv_bfloat16{}, float{});
    case kFloat16: return fn(__half{}, float{});
    default:
      return dispatch([&](auto tag) {
        using T = decltype(tag);
        return fn(T{}, T{});
      });
  }
}

// dispatch_floating, dispatch_numeric and dispatch_all with the 16-bit floats.
template <typename F>
decltype(auto) dispatch_floating_or_16bit(DType dtype, const char* op, F&& fn) {
  return with_16bit(dtype, [&](auto&& g) -> decltype(auto) { return dispatch_floating(dtype, op, g); }, fn);
}
template <typename F>
decltype(auto) dispatch_numeric_or_16bit(DType dtype, const char* op, F&& fn) {
  return with_16bit(dtype, [&](auto&& g) -> decltype(auto) { return dispatch_numeric(dtype, op, g); }, fn);
}
template <typename F>
decltype(auto) dispatch_any_storage(DType dtype, const char* op, F&& fn) {
  return with_16bit(dtype, [&](auto&& g) -> decltype(auto) { return dispatch_all(dtype, op, g); }, fn);
}

}  // namespace loom::cuda
