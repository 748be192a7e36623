// CUDA binary maps (BinaryOp): arithmetic, comparisons, logic and the fused
// activation gradients, with the formulas of the CPU's scalar path
// (tensor/cpu/elementwise.cc), run by loops.cuh; 16-bit floats computed in
// float (half.cuh).
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/loops.cuh"

namespace loom::cuda {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;   // 1/sqrt(2*pi)
constexpr double kGeluCubic = 0.044715;

constexpr bool is_compare(BinaryOp op) {
  return op == BinaryOp::Eq || op == BinaryOp::Ne || op == BinaryOp::Lt || op == BinaryOp::Le ||
         op == BinaryOp::Gt || op == BinaryOp::Ge;
}

template <BinaryOp OP, typename T>
struct BinaryFn {
  using Out = std::conditional_t<is_compare(OP), bool, T>;
  T alpha;

  __device__ Out operator()(T x, T y) const {
    if constexpr (OP == BinaryOp::Add) return T(x + alpha * y);
    else if constexpr (OP == BinaryOp::Sub) return T(x - alpha * y);
    else if constexpr (OP == BinaryOp::Mul) return T(x * y);
    else if constexpr (OP == BinaryOp::Div) return T(x / y);
    else if constexpr (OP == BinaryOp::Maximum) return (x > y || math::isnan(x)) ? x : y;  // a NaN wins
    else if constexpr (OP == BinaryOp::Minimum) return (x < y || math::isnan(x)) ? x : y;
    else if constexpr (OP == BinaryOp::Eq) return x == y;
    else if constexpr (OP == BinaryOp::Ne) return x != y;
    else if constexpr (OP == BinaryOp::Lt) return x < y;
    else if constexpr (OP == BinaryOp::Le) return x <= y;
    else if constexpr (OP == BinaryOp::Gt) return x > y;
    else if constexpr (OP == BinaryOp::Ge) return x >= y;
    else if constexpr (OP == BinaryOp::Pow) return math::pow(x, y);
    else if constexpr (OP == BinaryOp::Lerp) return x + alpha * (y - x);
    else if constexpr (OP == BinaryOp::ReluBackward) return y <= T(0) ? T(0) : x;  // x = dy, y = out
    else if constexpr (OP == BinaryOp::TanhBackward) return x * (T(1) - y * y);
    else if constexpr (OP == BinaryOp::SigmoidBackward) return x * y * (T(1) - y);
    else if constexpr (OP == BinaryOp::GeluTanhBackward) {  // x = dy, y = the forward input
      const T t = math::tanh(T(kSqrt2OverPi) * (y + T(kGeluCubic) * y * y * y));
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * y * y);
      return x * (T(0.5) * (T(1) + t) + T(0.5) * y * (T(1) - t * t) * du);
    } else if constexpr (OP == BinaryOp::GeluErfBackward) {  // Phi(y) + y phi(y)
      return x * (T(0.5) * (T(1) + math::erf(y * T(kInvSqrt2))) +
                  y * T(kInvSqrt2Pi) * math::exp(T(-0.5) * y * y));
    } else {
      static_assert(OP == BinaryOp::Add, "not a binary map of numbers");
    }
  }
};

struct LogicalAnd {
  __device__ bool operator()(bool x, bool y) const { return x && y; }
};
struct LogicalOr {
  __device__ bool operator()(bool x, bool y) const { return x || y; }
};

// S: the storage type; T: the type the functor computes in.
template <typename S, typename T>
void compare_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  auto run = [&](auto fn) { launch_elementwise<2, bool, S, S>(out, {&a, &b}, on_storage<bool>(fn)); };
#define LOOM_COMPARE_CASE(OP) \
  case BinaryOp::OP:          \
    return run(BinaryFn<BinaryOp::OP, T>{T(0)});
  switch (op) {
    LOOM_COMPARE_CASE(Eq)
    LOOM_COMPARE_CASE(Ne)
    LOOM_COMPARE_CASE(Lt)
    LOOM_COMPARE_CASE(Le)
    LOOM_COMPARE_CASE(Gt)
    LOOM_COMPARE_CASE(Ge)
    default:
      LOOM_INTERNAL_ASSERT(false, "binary op ", static_cast<int>(op), " is not a comparison");
  }
#undef LOOM_COMPARE_CASE
}

template <typename S, typename T>
void arith_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, T alpha) {
  auto run = [&](auto fn) { launch_elementwise<2, S, S, S>(out, {&a, &b}, on_storage<S>(fn)); };
#define LOOM_BINARY_CASE(OP) \
  case BinaryOp::OP:         \
    return run(BinaryFn<BinaryOp::OP, T>{alpha});
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      LOOM_BINARY_CASE(Pow)
      LOOM_BINARY_CASE(Lerp)
      LOOM_BINARY_CASE(ReluBackward)
      LOOM_BINARY_CASE(TanhBackward)
      LOOM_BINARY_CASE(SigmoidBackward)
      LOOM_BINARY_CASE(GeluTanhBackward)
      LOOM_BINARY_CASE(GeluErfBackward)
      default:
        break;
    }
  }
  switch (op) {
    LOOM_BINARY_CASE(Add)
    LOOM_BINARY_CASE(Sub)
    LOOM_BINARY_CASE(Mul)
    LOOM_BINARY_CASE(Div)
    LOOM_BINARY_CASE(Maximum)
    LOOM_BINARY_CASE(Minimum)
    default:
      LOOM_INTERNAL_ASSERT(false, "binary op ", static_cast<int>(op), " is not defined for ", a.dtype(),
                           " tensors");
  }
#undef LOOM_BINARY_CASE
}

}  // namespace

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                         double alpha) {
  if (op == BinaryOp::LogicalAnd) {
    launch_elementwise<2, bool, bool, bool>(out, {&a, &b}, LogicalAnd{});
    return;
  }
  if (op == BinaryOp::LogicalOr) {
    launch_elementwise<2, bool, bool, bool>(out, {&a, &b}, LogicalOr{});
    return;
  }
  if (is_comparison(op)) {
    dispatch_any_storage(a.dtype(), "compare", [&](auto storage, auto compute) {
      compare_typed<decltype(storage), decltype(compute)>(op, a, b, out);
    });
    return;
  }
  dispatch_numeric_or_16bit(a.dtype(), "binary", [&](auto storage, auto compute) {
    using T = decltype(compute);
    arith_typed<decltype(storage), T>(op, a, b, out, static_cast<T>(alpha));
  });
}

}  // namespace loom::cuda
