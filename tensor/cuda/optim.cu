// CUDA fused optimizer steps over many tensors per launch.
//
// A model has tens to hundreds of parameters, many of them small (biases,
// norms): a launch per parameter would cost more in launch overhead than the
// update itself. So parameters are packed, up to kMaxTensors per launch,
// into one kernel argument (their pointers and sizes, 2.6 KiB, inside CUDA's
// 4 KiB argument limit); each 256-thread block updates a chunk of kChunk
// elements of one tensor and finds which tensor by a binary search over the
// packed block offsets. A step of a typical model is then one launch per
// dtype. The per-element formulas are the CPU's (tensor/cpu/optim.cc).
// Parameters and state may be 16-bit floats (S): each element is updated in
// float and rounded once (half.cuh), as on the CPU.
#include <array>
#include <cmath>
#include <cstdint>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"

namespace loom::cuda {
namespace {

constexpr int kMaxTensors = 56;
constexpr int64_t kChunk = 4096;  // elements per block
constexpr int kOptimBlock = 256;

// The tensors of one launch: NPTR pointers per tensor (param, grad, state...).
template <typename T, int NPTR>
struct TensorPack {
  T* ptrs[NPTR][kMaxTensors];
  int64_t sizes[kMaxTensors];
  int first_block[kMaxTensors + 1];  // first_block[count] = blocks in the launch
  int count;
};

template <typename T, int NPTR, typename Update>
__global__ void __launch_bounds__(kOptimBlock) multi_tensor_kernel(TensorPack<T, NPTR> pack, Update update) {
  const int block = blockIdx.x;
  int lo = 0, hi = pack.count - 1;  // the last tensor whose first block <= this block
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (pack.first_block[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  const int64_t begin = static_cast<int64_t>(block - pack.first_block[lo]) * kChunk;
  const int64_t end = begin + kChunk < pack.sizes[lo] ? begin + kChunk : pack.sizes[lo];
  T* p[NPTR];
#pragma unroll
  for (int k = 0; k < NPTR; ++k) p[k] = pack.ptrs[k][lo];
  for (int64_t i = begin + threadIdx.x; i < end; i += kOptimBlock) update(p, i);
}

// Packs the tensors of dtype T from `lists` (same length, same shapes) and
// launches `update` over them, kMaxTensors at a time.
template <typename T, int NPTR, typename Update>
void multi_tensor_apply(const char* op, const std::array<const TensorList*, NPTR>& lists, const Update& update) {
  const TensorList& params = *lists[0];
  if (params.empty()) return;
  LaunchContext ctx(params[0]);
  TensorPack<T, NPTR> pack{};
  int64_t blocks = 0;
  auto flush = [&] {
    if (pack.count == 0) return;
    pack.first_block[pack.count] = static_cast<int>(blocks);
    multi_tensor_kernel<T, NPTR, Update><<<static_cast<unsigned>(blocks), kOptimBlock, 0, ctx.stream>>>(pack, update);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    pack = TensorPack<T, NPTR>{};
    blocks = 0;
  };
  for (size_t t = 0; t < params.size(); ++t) {
    if (params[t].dtype() != storage_dtype<T>() || params[t].numel() == 0) continue;
    const int64_t chunks = ceil_div(params[t].numel(), kChunk);
    if (blocks + chunks >= (int64_t{1} << 30)) flush();  // before this tensor's pointers go in: flush clears them
    for (int k = 0; k < NPTR; ++k) {
      const Tensor& x = (*lists[k])[t];
      LOOM_CHECK(x.device() == params[0].device(), op, ": tensor ", t, " is on ", x.device(),
                 " but the first parameter is on ", params[0].device());
      LOOM_CHECK(x.is_contiguous() && x.numel() == params[t].numel(), op, ": tensor ", t,
                 " of each list must be contiguous with ", params[t].numel(), " elements");
      LOOM_CHECK(x.dtype() == params[t].dtype(), op, ": tensor ", t, " of list ", k, " is ", x.dtype(),
                 " but its parameter is ", params[t].dtype());
      pack.ptrs[k][pack.count] = static_cast<T*>(x.raw_data());
    }
    pack.sizes[pack.count] = params[t].numel();
    pack.first_block[pack.count] = static_cast<int>(blocks);
    blocks += chunks;
    if (++pack.count == kMaxTensors) flush();
  }
  flush();
}

// A capturable step (backend.h's DeviceStepScalars) reads its values from
// the device when it runs: a graph replays it with its arguments fixed.
__device__ __forceinline__ bool skipped(const DeviceStepScalars& d) {
  return d.found_inf != nullptr && *d.found_inf != 0;
}

// One thread, before a capturable Adam step's update: advances the count and
// writes the bias corrections the update reads (as the CPU computes them).
__global__ void adam_prepare(DeviceStepScalars d, double beta1, double beta2) {
  if (skipped(d)) return;
  double* s = d.scalars;
  if (d.advance) s[1] += 1;
  s[2] = s[0] / (1 - pow(beta1, s[1]));
  s[3] = 1 / sqrt(1 - pow(beta2, s[1]));
}

// S: the storage type; T: the type each element is updated in.
template <typename S, typename T>
struct AdamUpdate {
  T lr, beta1, beta2, eps, weight_decay, step_size, inv_sqrt_bias2;
  bool decoupled;
  DeviceStepScalars device;  // where set, lr and the bias corrections come from there

  // p: param, grad, exp_avg, exp_avg_sq
  __device__ void operator()(S* const* p, int64_t i) const {
    T lr = this->lr, step_size = this->step_size, inv_sqrt_bias2 = this->inv_sqrt_bias2;
    if (device.scalars != nullptr) {
      if (skipped(device)) return;
      lr = T(device.scalars[0]);
      step_size = T(device.scalars[2]);
      inv_sqrt_bias2 = T(device.scalars[3]);
    }
    T w = widen(p[0][i]), grad = widen(p[1][i]), m = widen(p[2][i]), v = widen(p[3][i]);
    if (decoupled)
      w *= T(1) - lr * weight_decay;  // AdamW: decay the weight itself
    else
      grad += weight_decay * w;       // Adam: L2 penalty in the gradient
    m = beta1 * m + (T(1) - beta1) * grad;
    v = beta2 * v + (T(1) - beta2) * grad * grad;
    w -= step_size * m / (::sqrt(v) * inv_sqrt_bias2 + eps);
    p[0][i] = narrow_to<S>(w);
    p[2][i] = narrow_to<S>(m);
    p[3][i] = narrow_to<S>(v);
  }
};

// One thread: a capturable GradScaler's update (backend.h), as the CPU's.
__global__ void update_grad_scale_kernel(float* scale, float* good_steps, const float* found_inf, double growth,
                                         double backoff, int interval) {
  if (*found_inf != 0) {
    *scale = static_cast<float>(*scale * backoff);
    *good_steps = 0;
  } else if ((*good_steps += 1) >= interval) {
    const float grown = static_cast<float>(*scale * growth);
    if (isfinite(grown)) *scale = grown;
    *good_steps = 0;
  }
}

// One thread, before a capturable SGD step's update: advances the count.
__global__ void sgd_prepare(DeviceStepScalars d) {
  if (!skipped(d) && d.advance) d.scalars[1] += 1;
}

// The learning rate of an SGD step: the host's, or a capturable step's from the device.
template <typename T>
__device__ __forceinline__ T sgd_lr(T host_lr, const DeviceStepScalars& d) {
  return d.scalars != nullptr ? T(d.scalars[0]) : host_lr;
}

template <typename S, typename T>
struct SgdUpdate {
  T lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
  DeviceStepScalars device;

  // p: param, grad
  __device__ void operator()(S* const* p, int64_t i) const {
    if (skipped(device)) return;
    const T lr = sgd_lr(this->lr, device);
    const T w = widen(p[0][i]);
    p[0][i] = narrow_to<S>(w - lr * (widen(p[1][i]) + weight_decay * w));
  }
};

template <typename S, typename T>
struct SgdMomentumUpdate {
  T lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
  DeviceStepScalars device;

  // p: param, grad, momentum buffer
  __device__ void operator()(S* const* p, int64_t i) const {
    if (skipped(device)) return;
    const T lr = sgd_lr(this->lr, device);
    const T w = widen(p[0][i]);
    T d = widen(p[1][i]) + weight_decay * w;
    const T buf = first_step ? d : momentum * widen(p[2][i]) + (T(1) - dampening) * d;
    p[2][i] = narrow_to<S>(buf);
    d = nesterov ? d + momentum * buf : buf;
    p[0][i] = narrow_to<S>(w - lr * d);
  }
};

template <typename S, typename T>
struct UnscaleAndCheck {
  T inv_scale;
  float* found_inf;
  const float* device_scale;  // where set, inv_scale is 1 over it (a capturable GradScaler's)

  // p: grad. Threads that see a non-finite value all store the same 1.
  __device__ void operator()(S* const* p, int64_t i) const {
    const T inv = device_scale != nullptr ? T(1) / T(*device_scale) : inv_scale;
    const T g = widen(p[0][i]) * inv;
    p[0][i] = narrow_to<S>(g);
    if (!isfinite(g)) *found_inf = 1.0f;
  }
};

void check_floating(const char* op, const TensorList& params) {
  for (size_t t = 0; t < params.size(); ++t)
    LOOM_CHECK(is_floating(params[t].dtype()), op, ": parameter ", t, " is ", params[t].dtype(),
               "; expected a floating-point parameter");
}

// fn(storage, compute) for each floating dtype, in turn.
template <typename F>
void for_each_floating(F&& fn) {
  fn(float{}, float{});
  fn(double{}, double{});
  fn(__nv_bfloat16{}, float{});
  fn(__half{}, float{});
}

}  // namespace

void CudaBackend::adam_step(const TensorList& params, const TensorList& grads, const TensorList& exp_avg,
                            const TensorList& exp_avg_sq, const AdamParams& p) {
  LOOM_CHECK(grads.size() == params.size() && exp_avg.size() == params.size() &&
                 exp_avg_sq.size() == params.size(),
             "adam_step: ", params.size(), " parameters but ", grads.size(), " gradients, ", exp_avg.size(),
             " and ", exp_avg_sq.size(), " state tensors");
  check_floating("adam_step", params);
  const double bias1 = 1 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bias2 = 1 - std::pow(p.beta2, static_cast<double>(p.step));
  if (p.device.scalars != nullptr && !params.empty()) {
    LaunchContext ctx(params[0]);
    adam_prepare<<<1, 1, 0, ctx.stream>>>(p.device, p.beta1, p.beta2);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  }
  for_each_floating([&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    const AdamUpdate<S, T> update{T(p.lr), T(p.beta1), T(p.beta2), T(p.eps), T(p.weight_decay),
                                  T(p.lr / bias1), T(1 / std::sqrt(bias2)), p.decoupled_weight_decay, p.device};
    multi_tensor_apply<S, 4>("adam_step", {&params, &grads, &exp_avg, &exp_avg_sq}, update);
  });
}

void CudaBackend::sgd_step(const TensorList& params, const TensorList& grads, const TensorList& momentum_buffers,
                           const SgdParams& p) {
  LOOM_CHECK(grads.size() == params.size(), "sgd_step: ", params.size(), " parameters but ", grads.size(),
             " gradients");
  check_floating("sgd_step", params);
  const bool momentum = p.momentum != 0;
  LOOM_CHECK(!momentum || momentum_buffers.size() == params.size(), "sgd_step: ", params.size(),
             " parameters but ", momentum_buffers.size(), " momentum buffers");
  if (p.device.scalars != nullptr && p.device.advance && !params.empty()) {
    LaunchContext ctx(params[0]);
    sgd_prepare<<<1, 1, 0, ctx.stream>>>(p.device);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  }
  for_each_floating([&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    if (momentum) {
      const SgdMomentumUpdate<S, T> update{T(p.lr), T(p.momentum), T(p.dampening), T(p.weight_decay), p.nesterov,
                                           p.first_step, p.device};
      multi_tensor_apply<S, 3>("sgd_step", {&params, &grads, &momentum_buffers}, update);
    } else {
      const SgdUpdate<S, T> update{T(p.lr), T(p.momentum), T(p.dampening), T(p.weight_decay), p.nesterov,
                                   p.first_step, p.device};
      multi_tensor_apply<S, 2>("sgd_step", {&params, &grads}, update);
    }
  });
}

void CudaBackend::unscale_and_check_finite(const TensorList& grads, double inv_scale, const Tensor& found_inf,
                                           const Tensor& device_scale) {
  check_unscale_arguments(grads, found_inf, device_scale);
  const float* scale = device_scale.defined() ? device_scale.data_ptr<float>() : nullptr;
  for_each_floating([&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    const UnscaleAndCheck<S, T> update{T(inv_scale), found_inf.data_ptr<float>(), scale};
    multi_tensor_apply<S, 1>("unscale_and_check_finite", {&grads}, update);
  });
}

void CudaBackend::update_grad_scale(const Tensor& scale, const Tensor& good_steps, const Tensor& found_inf,
                                    double growth_factor, double backoff_factor, int growth_interval) {
  check_update_scale_arguments(scale, good_steps, found_inf);
  LaunchContext ctx(scale);
  update_grad_scale_kernel<<<1, 1, 0, ctx.stream>>>(scale.data_ptr<float>(), good_steps.data_ptr<float>(),
                                                    found_inf.data_ptr<float>(), growth_factor, backoff_factor,
                                                    growth_interval);
  LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
}

}  // namespace loom::cuda
