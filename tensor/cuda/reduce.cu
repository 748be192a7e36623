// CUDA reductions: sum / max / min over any set of dims, and argmax / argmin
// along one dim, for inputs of any strides.
//
// The plan splits a's dims into kept ones (one output each) and reduced ones,
// merging dims that step evenly through memory and sorting the reduced ones
// so that a unit-stride dim, if any, is innermost. Then one of two kernels:
//  - rows: the reduced elements of one output are contiguous. A warp (for up
//    to 4096 elements) or a 256-thread block (for more) reads them
//    coalesced, 16 bytes a load where the range starts 16-byte aligned, and
//    combines them with shuffles; when there are too few outputs to fill the
//    GPU (a full sum), each output's range is split over several blocks,
//    whose partial results a second kernel combines, a warp an output.
//  - columns: outputs are adjacent in memory (a sum over dim 0), or there are
//    only a few elements per output. Each thread walks one output's elements,
//    neighbouring threads reading neighbouring addresses; eight threads share
//    an output's range within a block, and more blocks when outputs are few.
// Accumulators are the CPU's: float sums accumulate in double, uint8 sums in
// int64, 16-bit floats as float (sums in double, rounded once at the end);
// max / min propagate NaN; argmax / argmin return the first extremum
// (the first NaN, if any).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tensor/creation.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/device_math.cuh"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/cuda/reduce_plan.h"

namespace loom::cuda {
namespace {

constexpr int kReduceBlock = 256;
constexpr int64_t kPieceAlign = 16;  // elements: a piece of a split row starts a whole number of packs in

// ---- what is combined ----

template <typename T> struct SumAccumulator { using type = T; };
template <> struct SumAccumulator<float> { using type = double; };
template <> struct SumAccumulator<__nv_bfloat16> { using type = double; };
template <> struct SumAccumulator<__half> { using type = double; };
template <> struct SumAccumulator<uint8_t> { using type = int64_t; };

// max/min/arg accumulate in T (16-bit floats as float), but shuffles need at least 32 bits.
template <typename T> struct CompareAccumulator { using type = compute_of_t<T>; };
template <> struct CompareAccumulator<uint8_t> { using type = uint32_t; };

template <typename T>
__device__ __forceinline__ T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -math::infinity<T>();
  else return std::numeric_limits<T>::lowest();
}

template <typename T>
__device__ __forceinline__ T highest() {
  if constexpr (std::is_floating_point_v<T>) return math::infinity<T>();
  else return std::numeric_limits<T>::max();
}

template <typename T>
struct SumOp {
  using In = T;
  using Acc = typename SumAccumulator<T>::type;
  using Out = T;
  __device__ static Acc identity() { return Acc(0); }
  __device__ static Acc project(T x, int64_t) { return Acc(widen(x)); }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
  __device__ static Out finish(Acc a) { return narrow_to<Out>(a); }
};

template <typename T, bool kMax>
struct ExtremumOp {
  using In = T;
  using Acc = typename CompareAccumulator<T>::type;
  using Out = T;
  __device__ static Acc identity() { return kMax ? lowest<Acc>() : highest<Acc>(); }
  __device__ static Acc project(T x, int64_t) { return Acc(widen(x)); }
  // NaN wins from either side, as in PyTorch.
  __device__ static Acc combine(Acc a, Acc b) {
    if (math::isnan(a)) return a;
    if (math::isnan(b)) return b;
    return kMax ? (a >= b ? a : b) : (a <= b ? a : b);
  }
  __device__ static Out finish(Acc a) { return narrow_to<Out>(a); }
};

template <typename V>
struct ArgAcc {
  V value;
  int64_t index;
};

template <typename T, bool kMax>
struct ArgOp {
  using In = T;
  using V = typename CompareAccumulator<T>::type;
  using Acc = ArgAcc<V>;
  using Out = int64_t;
  __device__ static Acc identity() {
    return {kMax ? lowest<V>() : highest<V>(), std::numeric_limits<int64_t>::max()};
  }
  __device__ static Acc project(T x, int64_t index) { return {V(widen(x)), index}; }
  // The first NaN, else the extremum, ties to the lower index: the same
  // answer in any combining order.
  __device__ static Acc combine(Acc a, Acc b) {
    const bool a_nan = math::isnan(a.value), b_nan = math::isnan(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.index < b.index ? a : b;
      return a_nan ? a : b;
    }
    if (kMax ? a.value > b.value : a.value < b.value) return a;
    if (kMax ? b.value > a.value : b.value < a.value) return b;
    return a.index < b.index ? a : b;
  }
  __device__ static Out finish(Acc a) { return a.index; }
};

template <typename V>
__device__ __forceinline__ V shuffle_down(V v, int delta) {
  return __shfl_down_sync(0xffffffffu, v, delta);
}

template <typename V>
__device__ __forceinline__ ArgAcc<V> shuffle_down(ArgAcc<V> v, int delta) {
  return {shuffle_down(v.value, delta), shuffle_down(v.index, delta)};
}

// Combines v over a group of G threads (a warp, or the whole 256-thread
// block); the result is valid in the group's first thread.
template <typename Op, int G>
__device__ __forceinline__ typename Op::Acc group_reduce(typename Op::Acc v) {
  using Acc = typename Op::Acc;
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v = Op::combine(v, shuffle_down(v, d));
  if constexpr (G == 32) {
    return v;
  } else {
    static_assert(G == kReduceBlock, "a group is a warp or the whole block");
    __shared__ Acc warp_results[kReduceBlock / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_results[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = lane < kReduceBlock / 32 ? warp_results[lane] : Op::identity();
#pragma unroll
      for (int d = 16; d > 0; d >>= 1) v = Op::combine(v, shuffle_down(v, d));
    }
    return v;
  }
}

// ---- kernels ----

// Sixteen bytes of consecutive elements, read with one load.
template <typename T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// Combines elements [r, end) of a contiguous range that starts 16-byte
// aligned, as whole packs (two loads in flight a thread), and moves r past
// them; the caller combines what is left one element at a time. Wide loads
// keep enough bytes in flight to reach the memory's bandwidth.
template <typename Op, int G>
__device__ __forceinline__ void combine_packs(typename Op::Acc& acc, const typename Op::In* base, int64_t& r,
                                              int64_t end, int lane) {
  using P = Pack<typename Op::In>;
  const P* packs = reinterpret_cast<const P*>(base + r);
  const int64_t count = (end - r) / P::kSize;
  for (int64_t i = lane; i < count; i += 2 * G) {
    const bool second = i + G < count;
    const P a = packs[i];
    P b;
    if (second) b = packs[i + G];
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) acc = Op::combine(acc, Op::project(a.v[j], r + i * P::kSize + j));
    if (second) {
#pragma unroll
      for (int j = 0; j < P::kSize; ++j) acc = Op::combine(acc, Op::project(b.v[j], r + (i + G) * P::kSize + j));
    }
  }
  r += count * P::kSize;
}

// Groups of G threads each reduce one output's contiguous range, or the
// blockIdx.y-th piece of it (pieces are whole packs long, so that each
// starts aligned where its range does).
template <typename Op, int G>
__global__ void __launch_bounds__(kReduceBlock)
    reduce_rows(const typename Op::In* in, typename Op::Out* out, typename Op::Acc* partial,
                ReducePlan plan, int64_t per_split) {
  constexpr int kGroups = kReduceBlock / G;
  const int lane = threadIdx.x % G;
  const int64_t output = static_cast<int64_t>(blockIdx.x) * kGroups + threadIdx.x / G;
  typename Op::Acc acc = Op::identity();
  int64_t in_offset = 0, out_offset = 0;
  if (output < plan.outputs) {
    kept_offsets(plan, output, in_offset, out_offset);
    int64_t begin = static_cast<int64_t>(blockIdx.y) * per_split;
    const int64_t end = begin + per_split < plan.reduced ? begin + per_split : plan.reduced;
    const typename Op::In* base = in + in_offset;
    if (plan.reduced_dims == 1 && reinterpret_cast<uintptr_t>(base + begin) % 16 == 0)
      combine_packs<Op, G>(acc, base, begin, end, lane);
    for (int64_t r = begin + lane; r < end; r += G)
      acc = Op::combine(acc, Op::project(base[reduced_offset(plan, r)], r));
  }
  acc = group_reduce<Op, G>(acc);  // every thread takes part: no early exit above
  if (lane == 0 && output < plan.outputs) {
    if (gridDim.y == 1) out[out_offset] = Op::finish(acc);
    else partial[static_cast<int64_t>(blockIdx.y) * plan.outputs + output] = acc;
  }
}

// Threads (x, y) of a 32 x 8 block: x picks the output, y one of the block's
// eight slices of its range (blockIdx.y picks which eight).
template <typename Op>
__global__ void __launch_bounds__(kReduceBlock)
    reduce_columns(const typename Op::In* in, typename Op::Out* out, typename Op::Acc* partial,
                   ReducePlan plan, int64_t per_slice) {
  using Acc = typename Op::Acc;
  __shared__ Acc slices[8][33];
  const int64_t output = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t slice = static_cast<int64_t>(blockIdx.y) * 8 + threadIdx.y;
  Acc acc = Op::identity();
  int64_t in_offset = 0, out_offset = 0;
  if (output < plan.outputs) {
    kept_offsets(plan, output, in_offset, out_offset);
    const int64_t begin = slice * per_slice;
    const int64_t end = begin + per_slice < plan.reduced ? begin + per_slice : plan.reduced;
    const typename Op::In* base = in + in_offset;
    for (int64_t r = begin; r < end; ++r) acc = Op::combine(acc, Op::project(base[reduced_offset(plan, r)], r));
  }
  slices[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && output < plan.outputs) {
#pragma unroll
    for (int y = 1; y < 8; ++y) acc = Op::combine(acc, slices[y][threadIdx.x]);
    if (gridDim.y == 1) out[out_offset] = Op::finish(acc);
    else partial[static_cast<int64_t>(blockIdx.y) * plan.outputs + output] = acc;
  }
}

// Combines the `splits` partial results of each output, a warp an output
// (outputs are few wherever there are splits).
template <typename Op>
__global__ void __launch_bounds__(kReduceBlock)
    reduce_partials(const typename Op::Acc* partial, typename Op::Out* out, ReducePlan plan, int64_t splits) {
  const int lane = threadIdx.x % 32;
  const int64_t output = static_cast<int64_t>(blockIdx.x) * (kReduceBlock / 32) + threadIdx.x / 32;
  typename Op::Acc acc = Op::identity();
  if (output < plan.outputs)
    for (int64_t s = lane; s < splits; s += 32) acc = Op::combine(acc, partial[s * plan.outputs + output]);
  acc = group_reduce<Op, 32>(acc);
  if (lane == 0 && output < plan.outputs) {
    int64_t in_offset, out_offset;
    kept_offsets(plan, output, in_offset, out_offset);
    out[out_offset] = Op::finish(acc);
  }
}

// How many blocks of the block-a-row kernel fit on a multiprocessor at once
// (its registers decide), asked once: a split row launches that many a
// multiprocessor, one full wave, without a second, partly idle one.
template <typename Op>
int resident_row_blocks() {
  static const int blocks = [] {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, reduce_rows<Op, kReduceBlock>, kReduceBlock, 0));
    return std::max(n, 1);
  }();
  return blocks;
}

template <typename Op>
void launch_reduce(const Tensor& a, const Tensor& out, const ReducePlan& plan) {
  using Acc = typename Op::Acc;
  LaunchContext ctx(out);
  const auto* in = static_cast<const typename Op::In*>(a.raw_data());
  auto* result = static_cast<typename Op::Out*>(out.raw_data());
  const int64_t outputs = plan.outputs, reduced = plan.reduced;
  const bool rows = plan.reduced_dims > 0 && plan.reduced_strides[0] == 1 && reduced >= 32;

  int64_t blocks = 0, splits = 1, per_piece = 0;
  int group = 32;
  if (rows) {
    group = reduced >= 4096 ? kReduceBlock : 32;
    blocks = ceil_div(outputs, kReduceBlock / group);
    if (group == kReduceBlock) {
      const int64_t full_wave = int64_t{ctx.multiprocessors} * resident_row_blocks<Op>();
      if (blocks < full_wave)  // each piece at least 4096 elements
        splits = std::min<int64_t>({ceil_div(full_wave, blocks), ceil_div(reduced, 4096), 65535});
    }
    per_piece = ceil_div(ceil_div(reduced, splits), kPieceAlign) * kPieceAlign;
    splits = ceil_div(reduced, per_piece);
  } else {
    const int64_t target_blocks = int64_t{ctx.multiprocessors} * 8;  // enough to keep every multiprocessor busy
    blocks = ceil_div(outputs, 32);
    if (blocks < target_blocks && reduced > 8 * 64)  // each slice at least 64 elements
      splits = std::min<int64_t>({ceil_div(target_blocks, blocks), ceil_div(reduced, 8 * 64), 65535});
    per_piece = ceil_div(reduced, splits * 8);
  }
  LOOM_CHECK(blocks < (int64_t{1} << 31), "reduce: ", outputs, " outputs are too many for one launch");

  Tensor scratch;
  Acc* partial = nullptr;
  if (splits > 1) {
    scratch = empty({splits * outputs * static_cast<int64_t>(sizeof(Acc))}, {.dtype = kUInt8, .device = out.device()});
    partial = static_cast<Acc*>(scratch.raw_data());
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(splits));
  if (rows && group == kReduceBlock)
    reduce_rows<Op, kReduceBlock><<<grid, kReduceBlock, 0, ctx.stream>>>(in, result, partial, plan, per_piece);
  else if (rows)
    reduce_rows<Op, 32><<<grid, kReduceBlock, 0, ctx.stream>>>(in, result, partial, plan, per_piece);
  else
    reduce_columns<Op><<<grid, dim3(32, 8), 0, ctx.stream>>>(in, result, partial, plan, per_piece);
  LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  if (splits > 1) {
    reduce_partials<Op><<<static_cast<unsigned>(ceil_div(outputs, kReduceBlock / 32)), kReduceBlock, 0, ctx.stream>>>(
        partial, result, plan, splits);
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  }
  // `scratch` goes back to the cache here; only work queued later on this
  // stream can reuse it, so the kernels above finish with it first.
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& a, const Tensor& out) {
  if (out.numel() == 0) return;
  const ReducePlan plan = make_plan(a, out, [&](int d) { return out.size(d) == 1; }, true);
  dispatch_numeric_or_16bit(a.dtype(), "reduce", [&](auto storage, auto) {
    using T = decltype(storage);
    switch (op) {
      case ReduceOp::Sum: return launch_reduce<SumOp<T>>(a, out, plan);
      case ReduceOp::Max: return launch_reduce<ExtremumOp<T, true>>(a, out, plan);
      case ReduceOp::Min: return launch_reduce<ExtremumOp<T, false>>(a, out, plan);
    }
  });
}

void CudaBackend::arg_reduce(ArgReduceOp op, const Tensor& a, int dim, const Tensor& out) {
  if (out.numel() == 0) return;
  // One reduced dim, never merged: the reduced index is the position along `dim`.
  const ReducePlan plan = make_plan(a, out, [&](int d) { return d == dim; }, false);
  dispatch_numeric_or_16bit(a.dtype(), "argmax", [&](auto storage, auto) {
    using T = decltype(storage);
    if (op == ArgReduceOp::ArgMax)
      launch_reduce<ArgOp<T, true>>(a, out, plan);
    else
      launch_reduce<ArgOp<T, false>>(a, out, plan);
  });
}

}  // namespace loom::cuda
