// CPU fused optimizer steps: each parameter is read and written once per step.
// The formulas are PyTorch's (torch.optim.Adam / AdamW / SGD).
#include <algorithm>
#include <atomic>
#include <cmath>

#include <Eigen/Core>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/vector_math.h"

namespace loom::cpu {
namespace {


// A capturable step (backend.h's DeviceStepScalars) on the CPU: its scalars
// are in host memory (the CPU never captures a graph, but a capturable
// optimizer runs the same bookkeeping there). Whether GradScaler's flag says
// to skip the step.
bool skipped(const DeviceStepScalars& d) { return d.found_inf != nullptr && *d.found_inf != 0; }

// The host values of a capturable Adam step, its count advanced.
AdamParams from_scalars(const AdamParams& p) {
  double* s = p.device.scalars;
  if (p.device.advance) s[1] += 1;
  AdamParams host = p;
  host.device = {};
  host.lr = s[0];
  host.step = static_cast<int64_t>(s[1]);
  s[2] = host.lr / (1 - std::pow(p.beta1, s[1]));
  s[3] = 1 / std::sqrt(1 - std::pow(p.beta2, s[1]));
  return host;
}

SgdParams from_scalars(const SgdParams& p) {
  if (p.device.advance) p.device.scalars[1] += 1;
  SgdParams host = p;
  host.device = {};
  host.lr = p.device.scalars[0];
  return host;
}

// Adam's step in one pass: each parameter's four values are read once and
// its three written once (as separate array passes over blocks in L1 it
// ran at 0.52x this on 512 K parameters, docs/benchmarks.md). The formulas
// are PyTorch's; each multiply-add is fused explicitly and the square root
// is correctly rounded, so a vector and the scalar tail compute the same
// bits, and a parameter's do not depend on where a range (a thread's, a
// ZeRO shard's) begins.

// The arithmetic on a scalar or on an Eigen packet, named alike.
inline float fused(float a, float b, float c) { return std::fma(a, b, c); }
inline double fused(double a, double b, double c) { return std::fma(a, b, c); }
template <typename P>
P fused(const P& a, const P& b, const P& c) {
  return Eigen::internal::pmadd(a, b, c);
}
inline float times(float a, float b) { return a * b; }
inline double times(double a, double b) { return a * b; }
template <typename P>
P times(const P& a, const P& b) {
  return Eigen::internal::pmul(a, b);
}
inline float root(float a) { return std::sqrt(a); }
inline double root(double a) { return std::sqrt(a); }
template <typename P>
P root(const P& a) {
  return packet_sqrt(a);  // correctly rounded, as std::sqrt (tensor/cpu/vector_math.h)
}
inline float over(float a, float b) { return a / b; }
inline double over(double a, double b) { return a / b; }
template <typename P>
P over(const P& a, const P& b) {
  return Eigen::internal::pdiv(a, b);
}

// A step's constants, in adam_update's order. (Plain arrays: a packet type
// as std::array's argument loses its alignment attribute, GCC warns.)
constexpr int kAdamConstants = 9;
template <typename T>
struct AdamConstants {
  T values[kAdamConstants];
};
template <typename T>
AdamConstants<T> adam_constants(const AdamParams& p, double bias1, double bias2) {
  return {{T(1 - p.lr * p.weight_decay), T(p.weight_decay), T(p.beta1), T(1 - p.beta1), T(p.beta2), T(1 - p.beta2),
           T(1 / std::sqrt(bias2)), T(p.eps), T(-p.lr / bias1)}};
}

// One parameter (V = T) or one packet of them: w, g, m, v in; w, m, v out.
// AdamW decays the weight itself; Adam adds the L2 term to the gradient.
template <bool Decoupled, typename V>
void adam_update(V& w, V g, V& m, V& v, const V (&k)[kAdamConstants]) {
  const auto& [decay, wd, b1, one_minus_b1, b2, one_minus_b2, inv_sqrt_bias2, eps, minus_step_size] = k;
  if constexpr (Decoupled)
    w = times(w, decay);
  else
    g = fused(wd, w, g);
  m = fused(b1, m, times(one_minus_b1, g));
  v = fused(b2, v, times(times(one_minus_b2, g), g));
  w = fused(minus_step_size, over(m, fused(root(v), inv_sqrt_bias2, eps)), w);
}

template <typename T, bool Decoupled>
void adam_range(T* w, const T* g, T* m, T* v, int64_t begin, int64_t end, const AdamConstants<T>& constants) {
  namespace e = Eigen::internal;
  using Packet = typename e::packet_traits<T>::type;
  constexpr int64_t kLanes = sizeof(Packet) / sizeof(T);  // (unpacket_traits<Packet> would drop its alignment too)
  const T(&scalars)[kAdamConstants] = constants.values;
  Packet packets[kAdamConstants];
  for (int i = 0; i < kAdamConstants; ++i) packets[i] = e::pset1<Packet>(scalars[i]);
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    Packet W = e::ploadu<Packet>(w + i), M = e::ploadu<Packet>(m + i), V = e::ploadu<Packet>(v + i);
    adam_update<Decoupled>(W, e::ploadu<Packet>(g + i), M, V, packets);
    e::pstoreu(w + i, W);
    e::pstoreu(m + i, M);
    e::pstoreu(v + i, V);
  }
  for (; i < end; ++i) adam_update<Decoupled>(w[i], g[i], m[i], v[i], scalars);
}

}  // namespace

void CpuBackend::adam_step(const TensorList& params, const TensorList& grads, const TensorList& exp_avg,
                           const TensorList& exp_avg_sq, const AdamParams& p) {
  if (p.device.scalars != nullptr) {
    if (!skipped(p.device)) adam_step(params, grads, exp_avg, exp_avg_sq, from_scalars(p));
    return;
  }
  if (any_16bit(params) || any_16bit(grads) || any_16bit(exp_avg) || any_16bit(exp_avg_sq)) {
    for (size_t t = 0; t < params.size(); ++t)  // a tensor at a time: the others may be float32
      if (!run_in_float32({params[t], grads[t], exp_avg[t], exp_avg_sq[t]}, {0, 2, 3}, [&](const TensorList& w) {
            adam_step({w[0]}, {w[1]}, {w[2]}, {w[3]}, p);
          }))
        adam_step({params[t]}, {grads[t]}, {exp_avg[t]}, {exp_avg_sq[t]}, p);
    return;
  }
  const double bias1 = 1 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bias2 = 1 - std::pow(p.beta2, static_cast<double>(p.step));
  for (size_t t = 0; t < params.size(); ++t) {
    dispatch_floating(params[t].dtype(), "adam_step", [&](auto tag) {
      using T = decltype(tag);
      T* w = params[t].data_ptr<T>();
      const T* g = grads[t].data_ptr<T>();
      T* m = exp_avg[t].data_ptr<T>();
      T* v = exp_avg_sq[t].data_ptr<T>();
      const AdamConstants<T> c = adam_constants<T>(p, bias1, bias2);
      parallel_for(params[t].numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        if (p.decoupled_weight_decay)
          adam_range<T, true>(w, g, m, v, begin, end, c);
        else
          adam_range<T, false>(w, g, m, v, begin, end, c);
      });
    });
  }
}

void CpuBackend::sgd_step(const TensorList& params, const TensorList& grads, const TensorList& buffers,
                          const SgdParams& p) {
  if (p.device.scalars != nullptr) {
    if (!skipped(p.device)) sgd_step(params, grads, buffers, from_scalars(p));
    return;
  }
  if (any_16bit(params) || any_16bit(grads) || any_16bit(buffers)) {
    // A tensor at a time: the others may be float32. No buffers without momentum.
    auto list = [](const Tensor& t) { return t.defined() ? TensorList{t} : TensorList{}; };
    for (size_t t = 0; t < params.size(); ++t) {
      const Tensor buffer = buffers.empty() ? Tensor() : buffers[t];
      if (!run_in_float32({params[t], grads[t], buffer}, {0, 2},
                          [&](const TensorList& w) { sgd_step({w[0]}, {w[1]}, list(w[2]), p); }))
        sgd_step({params[t]}, {grads[t]}, list(buffer), p);
    }
    return;
  }
  for (size_t t = 0; t < params.size(); ++t) {
    dispatch_floating(params[t].dtype(), "sgd_step", [&](auto tag) {
      using T = decltype(tag);
      T* w = params[t].data_ptr<T>();
      const T* g = grads[t].data_ptr<T>();
      T* buf = p.momentum != 0 ? buffers[t].data_ptr<T>() : nullptr;
      const T lr = T(p.lr), mu = T(p.momentum), damp = T(p.dampening), wd = T(p.weight_decay);
      parallel_for(params[t].numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          T d = g[i] + wd * w[i];
          if (buf) {
            buf[i] = p.first_step ? d : mu * buf[i] + (T(1) - damp) * d;
            d = p.nesterov ? d + mu * buf[i] : buf[i];
          }
          w[i] -= lr * d;
        }
      });
    });
  }
}

void CpuBackend::unscale_and_check_finite(const TensorList& grads, double inv_scale, const Tensor& found_inf,
                                          const Tensor& device_scale) {
  check_unscale_arguments(grads, found_inf, device_scale);
  if (device_scale.defined()) return unscale_and_check_finite(grads, 1.0 / device_scale.item(), found_inf, Tensor());
  std::atomic<bool> non_finite{false};
  for (const Tensor& grad : grads) {
    if (run_in_float32({grad}, {0}, [&](const TensorList& w) { unscale_and_check_finite(w, inv_scale, found_inf, Tensor()); }))
      continue;
    dispatch_floating(grad.dtype(), "unscale_and_check_finite", [&](auto tag) {
      using T = decltype(tag);
      T* g = grad.data_ptr<T>();
      const T inv = T(inv_scale);
      parallel_for(grad.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        bool here = false;
        for (int64_t i = begin; i < end; ++i) {
          g[i] *= inv;
          here |= !std::isfinite(g[i]);
        }
        if (here) non_finite.store(true, std::memory_order_relaxed);
      });
    });
  }
  if (non_finite.load()) found_inf.data_ptr<float>()[0] = 1;
}

void CpuBackend::update_grad_scale(const Tensor& scale, const Tensor& good_steps, const Tensor& found_inf,
                                   double growth_factor, double backoff_factor, int growth_interval) {
  check_update_scale_arguments(scale, good_steps, found_inf);
  float& s = scale.data_ptr<float>()[0];
  float& good = good_steps.data_ptr<float>()[0];
  if (found_inf.data_ptr<float>()[0] != 0) {
    s = static_cast<float>(s * backoff_factor);
    good = 0;
  } else if (++good >= growth_interval) {
    const float grown = static_cast<float>(s * growth_factor);
    if (std::isfinite(grown)) s = grown;
    good = 0;
  }
}

}  // namespace loom::cpu
