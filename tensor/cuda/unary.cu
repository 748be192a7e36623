// CUDA unary maps (UnaryOp): one functor per op, with the formulas of the
// CPU's scalar path (tensor/cpu/elementwise.cc), run by loops.cuh; 16-bit
// floats computed in float (half.cuh).
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/loops.cuh"

namespace loom::cuda {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;     // 1/sqrt(2)
constexpr double kGeluCubic = 0.044715;

template <UnaryOp OP, typename T>
struct UnaryFn {
  T alpha, beta;

  __device__ T operator()(T x) const {
    if constexpr (OP == UnaryOp::Neg) return T(-x);
    else if constexpr (OP == UnaryOp::Abs && std::is_unsigned_v<T>) return x;
    else if constexpr (OP == UnaryOp::Abs) return x < T(0) ? T(-x) : x;
    else if constexpr (OP == UnaryOp::Square) return T(x * x);
    else if constexpr (OP == UnaryOp::Sign && std::is_unsigned_v<T>) return T(x > T(0));
    else if constexpr (OP == UnaryOp::Sign) return T((T(0) < x) - (x < T(0)));
    else if constexpr (OP == UnaryOp::Clamp) return x < alpha ? alpha : (x > beta ? beta : x);
    else if constexpr (OP == UnaryOp::Relu) return (x > T(0) || math::isnan(x)) ? x : T(0);  // NaN stays
    else if constexpr (OP == UnaryOp::Reciprocal) return T(1) / x;
    else if constexpr (OP == UnaryOp::Exp) return math::exp(x);
    else if constexpr (OP == UnaryOp::Log) return math::log(x);
    else if constexpr (OP == UnaryOp::Sqrt) return math::sqrt(x);
    else if constexpr (OP == UnaryOp::Rsqrt) return T(1) / math::sqrt(x);
    else if constexpr (OP == UnaryOp::Sin) return math::sin(x);
    else if constexpr (OP == UnaryOp::Cos) return math::cos(x);
    else if constexpr (OP == UnaryOp::Tanh) return math::tanh(x);
    else if constexpr (OP == UnaryOp::Sigmoid) return math::sigmoid(x);
    else if constexpr (OP == UnaryOp::GeluTanh)  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      return T(0.5) * x * (T(1) + math::tanh(T(kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x)));
    else if constexpr (OP == UnaryOp::GeluErf)  // 0.5 x (1 + erf(x / sqrt(2)))
      return T(0.5) * x * (T(1) + math::erf(x * T(kInvSqrt2)));
    else if constexpr (OP == UnaryOp::PowScalar) return math::pow(x, alpha);
    else static_assert(OP == UnaryOp::Neg, "not a unary map of numbers");
  }
};

struct LogicalNot {
  __device__ bool operator()(bool x) const { return !x; }
};

// S: the storage type; T: the type the functor computes in.
template <typename S, typename T>
void unary_typed(UnaryOp op, const Tensor& a, const Tensor& out, T alpha, T beta) {
  auto run = [&](auto fn) { launch_elementwise<1, S, S>(out, {&a}, on_storage<S>(fn)); };
#define LOOM_UNARY_CASE(OP) \
  case UnaryOp::OP:         \
    return run(UnaryFn<UnaryOp::OP, T>{alpha, beta});
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      LOOM_UNARY_CASE(Reciprocal)
      LOOM_UNARY_CASE(Exp)
      LOOM_UNARY_CASE(Log)
      LOOM_UNARY_CASE(Sqrt)
      LOOM_UNARY_CASE(Rsqrt)
      LOOM_UNARY_CASE(Sin)
      LOOM_UNARY_CASE(Cos)
      LOOM_UNARY_CASE(Tanh)
      LOOM_UNARY_CASE(Sigmoid)
      LOOM_UNARY_CASE(GeluTanh)
      LOOM_UNARY_CASE(GeluErf)
      LOOM_UNARY_CASE(PowScalar)
      default:
        break;
    }
  }
  switch (op) {
    LOOM_UNARY_CASE(Neg)
    LOOM_UNARY_CASE(Abs)
    LOOM_UNARY_CASE(Square)
    LOOM_UNARY_CASE(Sign)
    LOOM_UNARY_CASE(Clamp)
    LOOM_UNARY_CASE(Relu)
    default:
      LOOM_INTERNAL_ASSERT(false, "unary op ", static_cast<int>(op), " is not defined for ", a.dtype(),
                           " tensors");
  }
#undef LOOM_UNARY_CASE
}

}  // namespace

void CudaBackend::unary(UnaryOp op, const Tensor& a, const Tensor& out, double alpha, double beta) {
  if (op == UnaryOp::LogicalNot) {
    launch_elementwise<1, bool, bool>(out, {&a}, LogicalNot{});
    return;
  }
  dispatch_numeric_or_16bit(a.dtype(), "unary", [&](auto storage, auto compute) {
    using T = decltype(compute);
    unary_typed<decltype(storage), T>(op, a, out, static_cast<T>(alpha), static_cast<T>(beta));
  });
}

}  // namespace loom::cuda
