// CPU elementwise kernels: unary, binary and ternary maps, copy, fill, arange.
//
// Each op is written twice, side by side: as a scalar function (for strided
// data) and as an Eigen array expression (for contiguous rows, where Eigen's
// vectorised exp/tanh/... apply), or as one Eigen functor with both forms
// where the expression would compute a subexpression twice (GeluTanhGrad), or
// where a vector form of loom's own is faster (exp8 in GeluTanh).
// Both must compute the same function; the CPU-vs-reference tests exercise both paths.
#include <unsupported/Eigen/SpecialFunctions>

#include <cmath>
#include <cstring>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/loops.h"
#include "tensor/cpu/relu.h"
#include "tensor/cpu/vector_math.h"
#include "tensor/element_cast.h"

namespace loom::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;   // sqrt(2/pi)
constexpr double kInvSqrt2 = 0.7071067811865476;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.3989422804014327;    // 1/sqrt(2*pi)
constexpr double kGeluCubic = 0.044715;

// GELU's tanh form through the logistic function: 0.5 (1 + tanh(u)) =
// 1 / (1 + e^-2u), u = sqrt(2/pi) (x + 0.044715 x^3). So
//   gelu(x) = x s,   gelu'(x) = s + 2 x u' s (1 - s),   s = 1 / (1 + e^-2u),
// one exponential and one division an element. In float32, with exp8
// (tensor/cpu/vector_math.h), the forward and backward of the gpt's
// activations run at 1.6x the Eigen tanh they replace and 1.8x Eigen's exp
// doing the same (docs/benchmarks.md).
// Each is one Eigen functor with a scalar and a vector form (as an array
// expression, each use of `s` would be a node of its own, computed twice).

// The square root and its reciprocal, correctly rounded in vector lanes as
// in the scalar code, so that a contiguous tensor and a strided view of the
// same values agree to the bit (and with PyTorch).
template <typename T>
struct Sqrt {
  T operator()(const T& x) const { return std::sqrt(x); }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    return packet_sqrt(x);
  }
};

template <typename T>
struct Rsqrt {
  T operator()(const T& x) const { return T(1) / std::sqrt(x); }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    return Eigen::internal::pdiv(Eigen::internal::pset1<Packet>(T(1)), packet_sqrt(x));
  }
};

// 1 + e^-2u of a packet, u = sqrt(2/pi) (x + 0.044715 x^3): gelu(x) = x /
// (1 + e^-2u), s = 1 / (1 + e^-2u).
template <typename T, typename Packet>
EIGEN_STRONG_INLINE Packet gelu_tanh_one_plus_exp(const Packet& x) {
  namespace e = Eigen::internal;
  const Packet inner = e::pmadd(e::pmul(e::pset1<Packet>(T(kGeluCubic)), e::pmul(x, x)), x, x);
  return e::padd(e::pset1<Packet>(T(1)), packet_exp(e::pmul(e::pset1<Packet>(T(-2 * kSqrt2OverPi)), inner)));
}

template <typename T>
struct GeluTanh {
  T operator()(const T& x) const {
    return x / (T(1) + std::exp(T(-2 * kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x)));
  }
  template <typename Packet>
  Packet packetOp(const Packet& x) const {
    return Eigen::internal::pdiv(x, gelu_tanh_one_plus_exp<T>(x));
  }
};

// gelu'(x) = s + 2 x u' s (1 - s) of a packet, s = 1 / one_plus_exp: the
// backward's work (GeluTanhGrad), which the forward can share
// (gelu_tanh_with_derivative).
template <typename T, typename Packet>
EIGEN_STRONG_INLINE Packet gelu_tanh_derivative(const Packet& x, const Packet& one_plus_exp) {
  namespace e = Eigen::internal;
  const Packet one = e::pset1<Packet>(T(1)), s = e::pdiv(one, one_plus_exp);
  const Packet two_du = e::pmul(e::pset1<Packet>(T(2 * kSqrt2OverPi)),
                                e::pmadd(e::pset1<Packet>(T(3 * kGeluCubic)), e::pmul(x, x), one));
  return e::padd(s, e::pmul(e::pmul(e::pmul(x, two_du), s), e::psub(one, s)));
}

template <typename T>
struct GeluTanhGrad {
  T operator()(const T& dy, const T& x) const {
    const T s = T(1) / (T(1) + std::exp(T(-2 * kSqrt2OverPi) * (x + T(kGeluCubic) * x * x * x)));
    const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * x * x);
    return dy * (s + T(2) * x * du * s * (T(1) - s));
  }
  template <typename Packet>
  Packet packetOp(const Packet& dy, const Packet& x) const {
    return Eigen::internal::pmul(dy, gelu_tanh_derivative<T>(x, gelu_tanh_one_plus_exp<T>(x)));
  }
};

#ifdef __AVX2__
// y = gelu(x) and dydx = gelu'(x) for n contiguous floats, every element in
// vector lanes (the last partial vector under a mask): y as GeluTanh's
// vector form computes it, dydx what GeluTanhGrad's multiplies dy by, so a
// backward of dy * dydx gives its bits. One exponential an element where
// the forward and the backward each took one. y stays x / (1 + e^-2u), not
// x s, which would save a division: with it, gelu(x) would round apart from
// the same input's forward without a gradient.
void gelu_tanh_with_derivative(const float* x, int64_t n, float* y, float* dydx) {
  parallel_for(n, kParallelGrain, [&](int64_t begin, int64_t end) {
    const VectorRow row(end - begin);
    row.for_each([&](int64_t i, auto full) {
      const __m256 v = row.load(x + begin, i, full);
      const __m256 one_plus_exp = gelu_tanh_one_plus_exp<float>(v);
      row.store(y + begin, i, _mm256_div_ps(v, one_plus_exp), full);
      row.store(dydx + begin, i, gelu_tanh_derivative<float>(v, one_plus_exp), full);
    });
  });
}
#endif

}  // namespace
}  // namespace loom::cpu

namespace Eigen::internal {
template <typename T>
struct functor_traits<loom::cpu::Sqrt<T>> {
  enum { Cost = 5 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasSqrt };
};
template <typename T>
struct functor_traits<loom::cpu::Rsqrt<T>> {
  enum { Cost = 10 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasSqrt && packet_traits<T>::HasDiv };
};
template <typename T>
struct functor_traits<loom::cpu::GeluTanh<T>> {
  enum { Cost = 15 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasDiv };
};
template <typename T>
struct functor_traits<loom::cpu::GeluTanhGrad<T>> {
  enum { Cost = 20 * NumTraits<T>::MulCost, PacketAccess = packet_traits<T>::HasExp && packet_traits<T>::HasDiv };
};
}  // namespace Eigen::internal

namespace loom::cpu {
namespace {

// out = f(a), with In/Out element types.
template <typename In, typename Out, typename Scalar, typename Vector>
void unary_loop(const Tensor& a, const Tensor& out, Scalar f, Vector vf) {
  for_each_strided<2>({&out, &a}, out.shape(), [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
      array_map<Out>(p[0], n) = vf(const_array_map<In>(p[1], n));
    } else {
      for (int64_t i = 0; i < n; ++i) at<Out>(p[0], i * s[0]) = f(at<In>(p[1], i * s[1]));
    }
  });
}

template <typename T>
void unary_numeric(UnaryOp op, const Tensor& a, const Tensor& out, T alpha, T beta) {
  auto run = [&](auto f, auto vf) { unary_loop<T, T>(a, out, f, vf); };
  switch (op) {
    case UnaryOp::Neg:
      return run([](T x) { return T(-x); }, [](const auto& x) { return -x; });
    case UnaryOp::Abs:
      return run([](T x) { return x < T(0) ? T(-x) : x; }, [](const auto& x) { return x.abs(); });
    case UnaryOp::Square:
      return run([](T x) { return T(x * x); }, [](const auto& x) { return x.square(); });
    case UnaryOp::Sign:
      return run([](T x) { return T((T(0) < x) - (x < T(0))); },
                 [](const auto& x) { return x.sign(); });
    case UnaryOp::Clamp:
      return run([=](T x) { return x < alpha ? alpha : (x > beta ? beta : x); },
                 [=](const auto& x) { return x.max(alpha).min(beta); });
    case UnaryOp::Relu:  // NaN stays NaN, as in PyTorch and on the GPU
      return run([](T x) { return relu_value(x); },
                 [](const auto& x) { return (x != x).select(x, x.max(T(0))); });
    default:
      LOOM_INTERNAL_ASSERT(false, "unary op ", static_cast<int>(op), " is not numeric");
  }
}

template <typename T>
void unary_floating(UnaryOp op, const Tensor& a, const Tensor& out, T alpha, T beta) {
  auto run = [&](auto f, auto vf) { unary_loop<T, T>(a, out, f, vf); };
  switch (op) {
    case UnaryOp::Reciprocal:
      return run([](T x) { return T(1) / x; }, [](const auto& x) { return x.inverse(); });
    case UnaryOp::Exp:
      return run([](T x) { return std::exp(x); }, [](const auto& x) { return x.exp(); });
    case UnaryOp::Log:
      return run([](T x) { return std::log(x); }, [](const auto& x) { return x.log(); });
    case UnaryOp::Sqrt:  // correctly rounded in vector lanes too (tensor/cpu/vector_math.h)
      return run(Sqrt<T>(), [](const auto& x) { return x.unaryExpr(Sqrt<T>()); });
    case UnaryOp::Rsqrt:  // 1 / sqrt(x), each rounded: Eigen's rsqrt is an estimate
      return run(Rsqrt<T>(), [](const auto& x) { return x.unaryExpr(Rsqrt<T>()); });
    case UnaryOp::Sin:
      return run([](T x) { return std::sin(x); }, [](const auto& x) { return x.sin(); });
    case UnaryOp::Cos:
      return run([](T x) { return std::cos(x); }, [](const auto& x) { return x.cos(); });
    case UnaryOp::Tanh:
      return run([](T x) { return std::tanh(x); }, [](const auto& x) { return x.tanh(); });
    case UnaryOp::Sigmoid:
      return run([](T x) { return T(1) / (T(1) + std::exp(-x)); },
                 [](const auto& x) { return x.logistic(); });
    case UnaryOp::GeluTanh:  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      return run(GeluTanh<T>(), [](const auto& x) { return x.unaryExpr(GeluTanh<T>()); });
    case UnaryOp::GeluErf:  // 0.5 x (1 + erf(x / sqrt(2)))
      return run([](T x) { return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2))); },
                 [](const auto& x) { return T(0.5) * x * (T(1) + (x * T(kInvSqrt2)).erf()); });
    case UnaryOp::PowScalar:
      return run([=](T x) { return std::pow(x, alpha); }, [=](const auto& x) { return x.pow(alpha); });
    default:
      return unary_numeric<T>(op, a, out, alpha, beta);
  }
}

// out = f(a, b); the vector form also takes one side as a broadcast constant.
template <typename In, typename Out, typename Scalar, typename Vector>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, Scalar f, Vector vf) {
  constexpr int64_t in = sizeof(In), o = sizeof(Out);
  for_each_strided<3>({&out, &a, &b}, out.shape(), [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == o && s[1] == in && s[2] == in) {
      array_map<Out>(p[0], n) = vf(const_array_map<In>(p[1], n), const_array_map<In>(p[2], n));
    } else if (s[0] == o && s[1] == in && s[2] == 0) {
      array_map<Out>(p[0], n) = vf(const_array_map<In>(p[1], n), Array1<In>::Constant(n, at<In>(p[2], 0)));
    } else if (s[0] == o && s[1] == 0 && s[2] == in) {
      array_map<Out>(p[0], n) = vf(Array1<In>::Constant(n, at<In>(p[1], 0)), const_array_map<In>(p[2], n));
    } else {
      for (int64_t i = 0; i < n; ++i)
        at<Out>(p[0], i * s[0]) = f(at<In>(p[1], i * s[1]), at<In>(p[2], i * s[2]));
    }
  });
}

template <typename T>
void binary_compare(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  auto run = [&](auto f, auto vf) { binary_loop<T, bool>(a, b, out, f, vf); };
  switch (op) {
    case BinaryOp::Eq: return run([](T x, T y) { return x == y; }, [](const auto& x, const auto& y) { return x == y; });
    case BinaryOp::Ne: return run([](T x, T y) { return x != y; }, [](const auto& x, const auto& y) { return x != y; });
    case BinaryOp::Lt: return run([](T x, T y) { return x < y; }, [](const auto& x, const auto& y) { return x < y; });
    case BinaryOp::Le: return run([](T x, T y) { return x <= y; }, [](const auto& x, const auto& y) { return x <= y; });
    case BinaryOp::Gt: return run([](T x, T y) { return x > y; }, [](const auto& x, const auto& y) { return x > y; });
    case BinaryOp::Ge: return run([](T x, T y) { return x >= y; }, [](const auto& x, const auto& y) { return x >= y; });
    default: LOOM_INTERNAL_ASSERT(false, "not a comparison");
  }
}

template <typename T>
void binary_arith(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, T alpha) {
  auto run = [&](auto f, auto vf) { binary_loop<T, T>(a, b, out, f, vf); };
  switch (op) {
    case BinaryOp::Add:
      return run([=](T x, T y) { return T(x + alpha * y); }, [=](const auto& x, const auto& y) { return x + alpha * y; });
    case BinaryOp::Sub:
      return run([=](T x, T y) { return T(x - alpha * y); }, [=](const auto& x, const auto& y) { return x - alpha * y; });
    case BinaryOp::Mul:
      return run([](T x, T y) { return T(x * y); }, [](const auto& x, const auto& y) { return x * y; });
    case BinaryOp::Div:
      return run([](T x, T y) { return T(x / y); }, [](const auto& x, const auto& y) { return x / y; });
    // A NaN on either side wins, as in PyTorch and on the GPU (Eigen's max
    // returns whichever operand its SIMD instruction does).
    case BinaryOp::Maximum:
      return run([](T x, T y) { return (x > y || x != x) ? x : y; },
                 [](const auto& x, const auto& y) { return (y != y).select(y, (x != x).select(x, x.max(y))); });
    case BinaryOp::Minimum:
      return run([](T x, T y) { return (x < y || x != x) ? x : y; },
                 [](const auto& x, const auto& y) { return (y != y).select(y, (x != x).select(x, x.min(y))); });
    default:
      LOOM_INTERNAL_ASSERT(false, "binary op ", static_cast<int>(op), " is not arithmetic");
  }
}

template <typename T>
void binary_floating(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, T alpha) {
  auto run = [&](auto f, auto vf) { binary_loop<T, T>(a, b, out, f, vf); };
  switch (op) {
    case BinaryOp::Pow:
      return run([](T x, T y) { return std::pow(x, y); }, [](const auto& x, const auto& y) { return x.pow(y); });
    case BinaryOp::Lerp:
      return run([=](T x, T y) { return x + alpha * (y - x); }, [=](const auto& x, const auto& y) { return x + alpha * (y - x); });
    case BinaryOp::ReluBackward:  // a = dy, b = y; 0 where y <= 0 even if dy is NaN (PyTorch's rule)
      return run([](T dy, T y) { return relu_gradient(dy, y); },
                 [](const auto& dy, const auto& y) { return (y <= T(0)).select(T(0), dy); });
    case BinaryOp::TanhBackward:  // dy (1 - y^2)
      return run([](T dy, T y) { return dy * (T(1) - y * y); },
                 [](const auto& dy, const auto& y) { return dy * (T(1) - y.square()); });
    case BinaryOp::SigmoidBackward:  // dy y (1 - y)
      return run([](T dy, T y) { return dy * y * (T(1) - y); },
                 [](const auto& dy, const auto& y) { return dy * y * (T(1) - y); });
    case BinaryOp::GeluTanhBackward:  // b = x
      return run(GeluTanhGrad<T>(), [](const auto& dy, const auto& x) { return dy.binaryExpr(x, GeluTanhGrad<T>()); });
    case BinaryOp::GeluErfBackward:  // Phi(x) + x phi(x)
      return run(
          [](T dy, T x) {
            return dy * (T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2))) +
                         x * T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x));
          },
          [](const auto& dy, const auto& x) {
            return dy * (T(0.5) * (T(1) + (x * T(kInvSqrt2)).erf()) +
                         x * T(kInvSqrt2Pi) * (T(-0.5) * x.square()).exp());
          });
    default:
      return binary_arith<T>(op, a, b, out, alpha);
  }
}

// A loop for ternary ops, which are rarer: contiguous rows get a plain loop the
// compiler vectorises; anything else steps through the strides.
template <typename A, typename T, typename F>
void ternary_loop(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out, F f) {
  for_each_strided<4>({&out, &a, &b, &c}, out.shape(), [&](char** p, const int64_t* s, int64_t n) {
    if (s[0] == sizeof(T) && s[1] == sizeof(A) && s[2] == sizeof(T) && s[3] == sizeof(T)) {
      T* o = reinterpret_cast<T*>(p[0]);
      const A* x = reinterpret_cast<const A*>(p[1]);
      const T* y = reinterpret_cast<const T*>(p[2]);
      const T* z = reinterpret_cast<const T*>(p[3]);
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i], z[i]);
    } else {
      for (int64_t i = 0; i < n; ++i)
        at<T>(p[0], i * s[0]) = f(at<A>(p[1], i * s[1]), at<T>(p[2], i * s[2]), at<T>(p[3], i * s[3]));
    }
  });
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& a, const Tensor& out, double alpha, double beta) {
  if (run_in_float32({a, out}, {1}, [&](const TensorList& t) { unary(op, t[0], t[1], alpha, beta); })) return;
  if (op == UnaryOp::LogicalNot) {
    unary_loop<bool, bool>(a, out, [](bool x) { return !x; }, [](const auto& x) { return !x; });
    return;
  }
  if (is_floating(a.dtype())) {
    dispatch_floating(a.dtype(), "unary", [&](auto tag) {
      using T = decltype(tag);
      unary_floating<T>(op, a, out, T(alpha), T(beta));
    });
  } else {
    dispatch_numeric(a.dtype(), "unary", [&](auto tag) {
      using T = decltype(tag);
      unary_numeric<T>(op, a, out, T(alpha), T(beta));
    });
  }
}

bool CpuBackend::has_unary_with_derivative(UnaryOp op, DType dtype) const {
#ifdef __AVX2__
  return op == UnaryOp::GeluTanh && dtype == kFloat32;
#else
  (void)op, (void)dtype;
  return false;
#endif
}

void CpuBackend::unary_with_derivative(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dydx) {
  LOOM_INTERNAL_ASSERT(has_unary_with_derivative(op, x.dtype()) && x.is_contiguous() && y.is_contiguous() &&
                           dydx.is_contiguous(),
                       "unary_with_derivative: no kernel for ", x.dtype(), " or a strided operand");
#ifdef __AVX2__
  gelu_tanh_with_derivative(x.data_ptr<float>(), x.numel(), y.data_ptr<float>(), dydx.data_ptr<float>());
#endif
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                        double alpha) {
  if (run_in_float32({a, b, out}, {2}, [&](const TensorList& t) { binary(op, t[0], t[1], t[2], alpha); })) return;
  if (op == BinaryOp::LogicalAnd) {
    binary_loop<bool, bool>(a, b, out, [](bool x, bool y) { return x && y; },
                            [](const auto& x, const auto& y) { return x && y; });
    return;
  }
  if (op == BinaryOp::LogicalOr) {
    binary_loop<bool, bool>(a, b, out, [](bool x, bool y) { return x || y; },
                            [](const auto& x, const auto& y) { return x || y; });
    return;
  }
  if (is_comparison(op)) {
    dispatch_all(a.dtype(), "compare", [&](auto tag) { binary_compare<decltype(tag)>(op, a, b, out); });
  } else if (is_floating(a.dtype())) {
    dispatch_floating(a.dtype(), "binary", [&](auto tag) {
      using T = decltype(tag);
      binary_floating<T>(op, a, b, out, T(alpha));
    });
  } else {
    dispatch_numeric(a.dtype(), "binary", [&](auto tag) {
      using T = decltype(tag);
      binary_arith<T>(op, a, b, out, T(alpha));
    });
  }
}

void CpuBackend::ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                         const Tensor& out, double alpha) {
  if (run_in_float32({a, b, c, out}, {3}, [&](const TensorList& t) { ternary(op, t[0], t[1], t[2], t[3], alpha); }))
    return;
  if (op == TernaryOp::Where) {
    dispatch_all(out.dtype(), "where", [&](auto tag) {
      using T = decltype(tag);
      ternary_loop<bool, T>(a, b, c, out, [](bool cond, T x, T y) { return cond ? x : y; });
    });
    return;
  }
  dispatch_floating(out.dtype(), op == TernaryOp::Addcmul ? "addcmul" : "addcdiv", [&](auto tag) {
    using T = decltype(tag);
    T v = T(alpha);
    if (op == TernaryOp::Addcmul)
      ternary_loop<T, T>(a, b, c, out, [v](T x, T y, T z) { return x + v * y * z; });
    else
      ternary_loop<T, T>(a, b, c, out, [v](T x, T y, T z) { return x + v * y / z; });
  });
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  LOOM_INTERNAL_ASSERT(src.device().is_cpu() && dst.device().is_cpu());
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    if (src.numel() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  dispatch_storage(src.dtype(), "copy", [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_storage(dst.dtype(), "copy", [&](auto dst_tag) {
      using D = decltype(dst_tag);
      for_each_strided<2>({&dst, &src}, dst.shape(), [&](char** p, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          S x = at<S>(p[1], i * s[1]);
          if constexpr (std::is_same_v<D, bool>)
            at<D>(p[0], i * s[0]) = x != S(0);
          else
            at<D>(p[0], i * s[0]) = element_cast<D>(x);
        }
      });
    });
  });
}

void CpuBackend::fill(const Tensor& out, double value) {
  dispatch_storage(out.dtype(), "fill", [&](auto tag) {
    using T = decltype(tag);
    T v = element_cast<T>(value);
    for_each_strided<1>({&out}, out.shape(), [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) at<T>(p[0], i * s[0]) = v;
    });
  });
}

void CpuBackend::arange(const Tensor& out, double start, double step) {
  if (run_in_float32({out}, {0}, [&](const TensorList& t) { arange(t[0], start, step); })) return;
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data_ptr<T>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = static_cast<T>(start + step * static_cast<double>(i));
  });
}

}  // namespace loom::cpu
