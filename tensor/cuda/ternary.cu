// CUDA ternary maps: where (select), addcmul and addcdiv (the optimizers'
// fused updates), with the CPU's formulas, run by loops.cuh.
#include "tensor/cuda/cuda_backend.h"
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
    dispatch_all(out.dtype(), "where", [&](auto tag) {
      using T = decltype(tag);
      launch_elementwise<3, T, bool, T, T>(out, {&a, &b, &c}, Where<T>{});
    });
    return;
  }
  dispatch_floating(out.dtype(), op == TernaryOp::Addcmul ? "addcmul" : "addcdiv", [&](auto tag) {
    using T = decltype(tag);
    if (op == TernaryOp::Addcmul)
      launch_elementwise<3, T, T, T, T>(out, {&a, &b, &c}, Addcmul<T>{T(alpha)});
    else
      launch_elementwise<3, T, T, T, T>(out, {&a, &b, &c}, Addcdiv<T>{T(alpha)});
  });
}

}  // namespace loom::cuda
