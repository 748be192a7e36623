// CUDA fused attention, forward and backward: the launches of the kernels in
// attention_kernels.cuh and attention_tensor_core.cuh (which say how they
// work). bfloat16 and float16 run on tensor cores (attention_tensor_core.cuh:
// 16-bit products accumulated in float); float32 and float64 on the FP32 and
// FP64 cores (attention_kernels.cuh). Both use attention_kernels.cuh's delta
// kernel.
//
// Head dims up to 128: each kernel is compiled for a bound of 64 and of 128
// (registers and shared tiles are sized by it), and the smaller one that
// holds both D and Dv runs. The backward takes one temporary from the caching
// allocator, delta (B, H, Tq), in the compute type; it goes back to the cache
// for later work on this stream only, so nothing waits on the host. When the
// caller allows a nondeterministic backward (AttentionParams), float32 and
// float64 run the dk/dv kernel that adds dq's shares with atomics into dq,
// zeroed first, instead of the dq kernel.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tensor/creation.h"
#include "tensor/cuda/attention_kernels.cuh"
#include "tensor/cuda/attention_tensor_core.cuh"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"

namespace loom::cuda {
namespace {

constexpr int64_t kMaxHeadDim = 128;
constexpr int64_t kMaxGridYZ = 65535;

template <typename S>
AttentionOperand<S> operand(const Tensor& t) {
  return {data_of<S>(t), t.stride(0), t.stride(1), t.stride(2)};
}

// Checks what the kernels assume and returns the sizes they take.
AttentionSizes attention_sizes(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttentionParams& p, std::initializer_list<const Tensor*> rows) {
  const int64_t qk_dim = q.size(3), v_dim = v.size(3);
  LOOM_CHECK(!p.causal || q.size(2) <= k.size(2), op, ": a causal mask needs no more queries than keys (the queries ",
             "are the last of the keys' positions), got q ", q.shape(), " and k ", k.shape());
  LOOM_CHECK(qk_dim <= kMaxHeadDim && v_dim <= kMaxHeadDim, op, ": the CUDA kernels take head dims up to ", kMaxHeadDim,
             ", got q ", q.shape(), " and v ", v.shape());
  LOOM_CHECK(q.size(0) <= kMaxGridYZ && q.size(1) <= kMaxGridYZ, op, ": at most ", kMaxGridYZ,
             " batches and heads, got q ", q.shape());
  LOOM_CHECK(q.size(2) <= INT32_MAX && k.size(2) <= INT32_MAX, op, ": sequences too long: q ", q.shape(), ", k ",
             k.shape());
  for (const Tensor* t : rows)
    LOOM_INTERNAL_ASSERT(t->dim() == 4 && t->stride(3) == 1, op, ": operands need a contiguous last dim, got ",
                         t->shape(), " with strides ", t->strides());
  return {static_cast<int>(q.size(1)), static_cast<int>(q.size(2)), static_cast<int>(k.size(2)),
          static_cast<int>(qk_dim), static_cast<int>(v_dim)};
}

// launch(HEAD) with the smaller compiled head-dim bound that holds both head dims.
template <typename Launch>
void with_head_bound(const AttentionSizes& n, Launch&& launch) {
  if (std::max(n.qk_dim, n.v_dim) <= 64)
    launch(std::integral_constant<int, 64>());
  else
    launch(std::integral_constant<int, 128>());
}

// Kernels may use more than the default 48 KB of dynamic shared memory only when told.
template <typename Kernel>
void allow_shared_bytes(Kernel* kernel, int bytes) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// The kernels for storage type S (compute type T) and head-dim bound HEAD,
// with their block shape and shared memory: the tensor-core ones for the
// 16-bit floats, the SIMT ones otherwise. Their parameters agree (T is float
// for 16 bits), so one launch takes either.
template <typename S, typename T, int HEAD>
struct AttentionKernels {
  static constexpr bool kTensorCores = std::is_same_v<S, __nv_bfloat16> || std::is_same_v<S, __half>;
  static constexpr int kRows = kTensorCores ? kTensorCoreRows : attention_tile<T>();  // q's (k's for dk, dv) per block
  static constexpr int kThreads = kTensorCores ? kTensorCoreThreads : kAttentionThreads;

  static constexpr int forward_shared() {
    if constexpr (kTensorCores)
      return tensor_core_forward_shared_bytes<HEAD>();
    else
      return attention_forward_shared_bytes<T, HEAD>();
  }
  static constexpr int dkdv_shared() {
    if constexpr (kTensorCores)
      return tensor_core_dkdv_shared_bytes<HEAD>();
    else
      return attention_dkdv_shared_bytes<T, HEAD>();
  }
  static constexpr int dq_shared() {
    if constexpr (kTensorCores)
      return tensor_core_dq_shared_bytes<HEAD>();
    else
      return attention_dq_shared_bytes<T, HEAD>();
  }
  static auto* forward() {
    if constexpr (kTensorCores)
      return attention_forward_tensor_core_kernel<S, HEAD>;
    else
      return attention_forward_kernel<S, T, HEAD>;
  }
  static auto* dkdv() {
    if constexpr (kTensorCores)
      return attention_dkdv_tensor_core_kernel<S, HEAD>;
    else
      return attention_dkdv_kernel<S, T, HEAD>;
  }
  static auto* dq() {
    if constexpr (kTensorCores)
      return attention_dq_tensor_core_kernel<S, HEAD>;
    else
      return attention_dq_kernel<S, T, HEAD>;
  }
};

dim3 tile_grid(int rows, int per_block, int64_t heads, int64_t batch) {
  return dim3(static_cast<unsigned>(ceil_div(rows, per_block)), static_cast<unsigned>(heads),
              static_cast<unsigned>(batch));
}

}  // namespace

int64_t CudaBackend::attention_max_head_dim() const { return kMaxHeadDim; }

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                            const Tensor& out, const Tensor& logsumexp) {
  const AttentionSizes n = attention_sizes("attention", q, k, v, p, {&q, &k, &v, &out});
  dispatch_floating_or_16bit(q.dtype(), "attention", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LOOM_INTERNAL_ASSERT(logsumexp.dtype() == storage_dtype<T>() && logsumexp.is_contiguous(),
                         "attention: logsumexp must be contiguous ", storage_dtype<T>(), ", got ", logsumexp.dtype());
    LaunchContext ctx(q);
    with_head_bound(n, [&](auto head) {
      using Kernels = AttentionKernels<S, T, decltype(head)::value>;
      constexpr int shared = Kernels::forward_shared();
      auto* kernel = Kernels::forward();
      allow_shared_bytes(kernel, shared);
      kernel<<<tile_grid(n.queries, Kernels::kRows, q.size(1), q.size(0)), Kernels::kThreads, shared, ctx.stream>>>(
          operand<const S>(q), operand<const S>(k), operand<const S>(v), operand<S>(out), data_of<T>(logsumexp), n,
          T(p.scale), p.causal);
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    });
  });
}

void CudaBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& dout, const Tensor& logsumexp, const AttentionParams& p,
                                     const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const AttentionSizes n = attention_sizes("attention_backward", q, k, v, p, {&q, &k, &v, &out, &dout, &dq, &dk, &dv});
  dispatch_floating_or_16bit(q.dtype(), "attention_backward", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using T = decltype(compute);
    LOOM_INTERNAL_ASSERT(logsumexp.dtype() == storage_dtype<T>() && logsumexp.is_contiguous(),
                         "attention_backward: logsumexp must be contiguous ", storage_dtype<T>(), ", got ",
                         logsumexp.dtype());
    LaunchContext ctx(q);
    const int64_t heads = q.size(1), batch = q.size(0);
    // float32 and float64 by default: dq's shares added with atomics into dq, which the delta kernel zeroes.
    constexpr bool kSimt = std::is_same_v<S, T>;
    const bool atomic_dq = kSimt && !p.deterministic;
    AttentionOperand<T> dq_to_zero{};
    if constexpr (kSimt)
      if (atomic_dq) dq_to_zero = operand<T>(dq);
    Tensor delta = empty({batch, heads, n.queries}, {.dtype = storage_dtype<T>(), .device = q.device()});
    attention_delta_kernel<S, T>
        <<<tile_grid(n.queries, kDeltaRowsPerBlock, heads, batch), kAttentionThreads, 0, ctx.stream>>>(
            operand<const S>(out), operand<const S>(dout), data_of<T>(delta), n, dq_to_zero);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    with_head_bound(n, [&](auto head) {
      using Kernels = AttentionKernels<S, T, decltype(head)::value>;
      const T scale = T(p.scale);
      if constexpr (!Kernels::kTensorCores) {
        if (atomic_dq) {  // the dk/dv kernel's tiles, and dq's shares added into dq (zeroed above)
          constexpr int shared = Kernels::dkdv_shared();
          auto* kernel = attention_dkdv_dq_kernel<T, decltype(head)::value>;
          allow_shared_bytes(kernel, shared);
          kernel<<<tile_grid(n.keys, Kernels::kRows, heads, batch), Kernels::kThreads, shared, ctx.stream>>>(
              operand<const T>(q), operand<const T>(k), operand<const T>(v), operand<const T>(dout),
              data_of<const T>(logsumexp), data_of<const T>(delta), operand<T>(dk), operand<T>(dv), operand<T>(dq), n,
              scale, p.causal);
          LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
          return;
        }
      }
      constexpr int dkdv_shared = Kernels::dkdv_shared();
      auto* dkdv_kernel = Kernels::dkdv();
      allow_shared_bytes(dkdv_kernel, dkdv_shared);
      dkdv_kernel<<<tile_grid(n.keys, Kernels::kRows, heads, batch), Kernels::kThreads, dkdv_shared, ctx.stream>>>(
          operand<const S>(q), operand<const S>(k), operand<const S>(v), operand<const S>(dout),
          data_of<const T>(logsumexp), data_of<const T>(delta), operand<S>(dk), operand<S>(dv), n, scale, p.causal);
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);

      constexpr int dq_shared = Kernels::dq_shared();
      auto* dq_kernel = Kernels::dq();
      allow_shared_bytes(dq_kernel, dq_shared);
      dq_kernel<<<tile_grid(n.queries, Kernels::kRows, heads, batch), Kernels::kThreads, dq_shared, ctx.stream>>>(
          operand<const S>(q), operand<const S>(k), operand<const S>(v), operand<const S>(dout),
          data_of<const T>(logsumexp), data_of<const T>(delta), operand<S>(dq), n, scale, p.causal);
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    });
  });
}

}  // namespace loom::cuda
