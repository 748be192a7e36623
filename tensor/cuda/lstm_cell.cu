// CUDA LSTM cell: the pointwise part of a step, one thread per (row, unit).
// Each thread reads its unit's four gates from both products and writes h,
// c and the four activations: one kernel each way where the composed cell
// launched eleven elementwise kernels. 16-bit values are widened on load
// and rounded once on store (half.cuh).
#include <cstdint>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"

namespace loom::cuda {
namespace {

// Gates rows are (4H): unit j of row b has its i, f, g, o at b 4H + j + {0, H, 2H, 3H}.
template <typename S, typename T>
__global__ void lstm_cell_kernel(const S* __restrict__ input_gates, const S* __restrict__ hidden_gates,
                                 const S* __restrict__ c_prev, S* __restrict__ h, S* __restrict__ c,
                                 S* __restrict__ activations, int64_t units, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < units;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = k / n, j = k % n, base = row * 4 * n + j;
    auto gate = [&](int q) { return widen(input_gates[base + q * n]) + widen(hidden_gates[base + q * n]); };
    const T i = math::sigmoid(T(gate(0))), f = math::sigmoid(T(gate(1))), g = math::tanh(T(gate(2))),
            o = math::sigmoid(T(gate(3)));
    const T c_new = f * T(widen(c_prev[k])) + i * g;
    c[k] = narrow_to<S>(c_new);
    h[k] = narrow_to<S>(o * math::tanh(c_new));
    activations[base] = narrow_to<S>(i);
    activations[base + n] = narrow_to<S>(f);
    activations[base + 2 * n] = narrow_to<S>(g);
    activations[base + 3 * n] = narrow_to<S>(o);
  }
}

// The CPU's formulas (tensor/cpu/lstm_cell.cc): with t = tanh(c),
// dc_total = dc + dh o (1 - t^2); each gate's d times its activation's derivative.
template <typename S, typename T>
__global__ void lstm_cell_backward_kernel(const S* __restrict__ dh, const S* __restrict__ dc,
                                          const S* __restrict__ activations, const S* __restrict__ c_prev,
                                          const S* __restrict__ c, S* __restrict__ dgates,
                                          S* __restrict__ dc_prev, int64_t units, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < units;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = k / n, j = k % n, base = row * 4 * n + j;
    const T i = widen(activations[base]), f = widen(activations[base + n]), g = widen(activations[base + 2 * n]),
            o = widen(activations[base + 3 * n]);
    const T dh_k = widen(dh[k]), t = math::tanh(T(widen(c[k])));
    const T dc_total = T(widen(dc[k])) + dh_k * o * (T(1) - t * t);
    dgates[base] = narrow_to<S>(dc_total * g * i * (T(1) - i));
    dgates[base + n] = narrow_to<S>(dc_total * T(widen(c_prev[k])) * f * (T(1) - f));
    dgates[base + 2 * n] = narrow_to<S>(dc_total * i * (T(1) - g * g));
    dgates[base + 3 * n] = narrow_to<S>(dh_k * t * o * (T(1) - o));
    dc_prev[k] = narrow_to<S>(dc_total * f);
  }
}

}  // namespace

void CudaBackend::lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev,
                            const Tensor& h, const Tensor& c, const Tensor& activations) {
  const int64_t units = c.numel();
  if (units == 0) return;
  dispatch_floating_or_16bit(c.dtype(), "lstm_cell", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LaunchContext ctx(c);
    lstm_cell_kernel<S, T><<<ctx.grid(units), kBlockSize, 0, ctx.stream>>>(
        data_of<const S>(input_gates), data_of<const S>(hidden_gates), data_of<const S>(c_prev), data_of<S>(h),
        data_of<S>(c), data_of<S>(activations), units, c.size(1));
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

void CudaBackend::lstm_cell_backward(const Tensor& dh, const Tensor& dc, const Tensor& activations,
                                     const Tensor& c_prev, const Tensor& c, const Tensor& dgates,
                                     const Tensor& dc_prev) {
  const int64_t units = c.numel();
  if (units == 0) return;
  dispatch_floating_or_16bit(c.dtype(), "lstm_cell_backward", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LaunchContext ctx(c);
    lstm_cell_backward_kernel<S, T><<<ctx.grid(units), kBlockSize, 0, ctx.stream>>>(
        data_of<const S>(dh), data_of<const S>(dc), data_of<const S>(activations), data_of<const S>(c_prev),
        data_of<const S>(c), data_of<S>(dgates), data_of<S>(dc_prev), units, c.size(1));
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

}  // namespace loom::cuda
