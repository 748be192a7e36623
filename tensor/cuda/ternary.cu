// CUDA ternary maps: where (select), addcmul and addcdiv (the optimizers'
// fused updates), with the CPU's formulas, run by loops.cuh; 16-bit floats
// computed in float (half.cuh).
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/loops.cuh"

namespace loom::cuda {
namespace {

template <typename T>
struct Where {
  __device__ T operator()(bool condition, T x, T y) const { return condition ? x : y; }
};

template <typename T>
struct Addcmul {
  T value;
  __device__ T operator()(T x, T y, T z) const { return x + value * y * z; }
};

template <typename T>
struct Addcdiv {
  T value;
  __device__ T operator()(T x, T y, T z) const { return x + value * y / z; }
};

}  // namespace

void CudaBackend::ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                          const Tensor& out, double alpha) {
  if (op == TernaryOp::Where) {
    dispatch_any_storage(out.dtype(), "where", [&](auto storage, auto) {
      using S = decltype(storage);  // selects without arithmetic
      launch_elementwise<3, S, bool, S, S>(out, {&a, &b, &c}, Where<S>{});
    });
    return;
  }
  dispatch_floating_or_16bit(out.dtype(), op == TernaryOp::Addcmul ? "addcmul" : "addcdiv", [&](auto storage,
                                                                                                  auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    if (op == TernaryOp::Addcmul)
      launch_elementwise<3, S, S, S, S>(out, {&a, &b, &c}, on_storage<S>(Addcmul<T>{T(alpha)}));
    else
      launch_elementwise<3, S, S, S, S>(out, {&a, &b, &c}, on_storage<S>(Addcdiv<T>{T(alpha)}));
  });
}

}  // namespace loom::cuda
