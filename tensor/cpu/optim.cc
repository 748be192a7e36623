// CPU fused optimizer steps: each parameter is read and written once per step.
// The formulas are PyTorch's (torch.optim.Adam / AdamW / SGD).
#include <algorithm>
#include <atomic>
#include <cmath>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/parallel.h"

namespace loom::cpu {
namespace {

// Parameters an Adam block updates at a time: its four arrays' blocks (32 KB
// of float32) stay in L1 between the update's passes.
constexpr int64_t kAdamBlock = 2048;

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
      const T lr = T(p.lr), b1 = T(p.beta1), b2 = T(p.beta2), eps = T(p.eps), wd = T(p.weight_decay);
      const T step_size = T(p.lr / bias1), inv_sqrt_bias2 = T(1 / std::sqrt(bias2));
      const bool decoupled = p.decoupled_weight_decay;
      // Eigen array expressions, so the square root and the division are
      // vectorised (the scalar loop they replace was not: its four pointers
      // might alias, and it branched on `decoupled` inside). Each statement
      // is a pass over a block small enough to stay in L1.
      parallel_for(params[t].numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
        alignas(64) T penalised[kAdamBlock];  // Adam's gradient with its L2 term, made once a block
        for (int64_t b = begin; b < end; b += kAdamBlock) {
          const int64_t n = std::min(kAdamBlock, end - b);
          ArrayMap<T> W(w + b, n), M(m + b, n), V(v + b, n);
          if (decoupled)
            W *= T(1) - lr * wd;  // AdamW: decay the weight itself
          else
            ArrayMap<T>(penalised, n) = ConstArrayMap<T>(g + b, n) + wd * W;  // Adam: L2 penalty in the gradient
          const ConstArrayMap<T> G(decoupled ? g + b : penalised, n);
          M = b1 * M + (T(1) - b1) * G;
          V = b2 * V + (T(1) - b2) * G * G;
          W -= step_size * M / (V.sqrt() * inv_sqrt_bias2 + eps);
        }
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
