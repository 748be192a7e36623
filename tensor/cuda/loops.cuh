// The engine of every CUDA elementwise kernel (maps, copies, fills).
//
// An op is a functor of 0 to 3 inputs; launch_elementwise() runs it over every
// element of `out`, whose inputs arrive broadcast to out's shape (stride-0
// dims) with any strides:
//
//   struct Scale { float s; __device__ float operator()(float x) const { return s * x; } };
//   launch_elementwise<1, float, float>(out, {&x}, Scale{2.f});   // out = 2 x
//
// Dims that are contiguous for every operand are merged and size-1 dims
// dropped (merge_dims, which the CPU's loops.h runs too), so most calls end
// up one-dimensional.
// Then there are three kernels:
//  - contiguous: every operand is dense or a broadcast scalar (stride 0 in
//    the one dim left). Threads move 4 elements per access (16-byte float4
//    loads and stores when the pointers allow) and keep two such accesses
//    per operand in flight: this is the bandwidth-bound fast path.
//  - rows: the innermost dim is contiguous (or broadcast) for every operand
//    and at least a warp long, the outer dims anything (a slice of each
//    row, a head's columns of a projection, cat's destinations). A warp
//    takes 256 elements of a row (so that a few long rows still fill the
//    GPU), eight loads a lane in flight: offsets come by division once a
//    segment, not once an element.
//  - strided: anything else; each element's offsets come from its linear
//    index by division over the (merged) dims.
#pragma once

#include <array>
#include <cstdint>

#include "tensor/cuda/launch.h"
#include "tensor/merged_layout.h"
#include "tensor/tensor.h"

namespace loom::cuda {

template <int N>
struct ContiguousArgs {
  char* base[N] = {};
  uint32_t scalar_mask = 0;  // bit k-1: input k is one value broadcast to every element
  bool vectorized = false;   // every dense pointer is aligned for 4-element accesses
};

constexpr int kVec = 4;     // elements per access in the contiguous kernel
constexpr int kUnroll = 2;  // accesses per operand in flight per thread

template <typename T>
struct alignas(sizeof(T) * kVec) Vec {
  T v[kVec];
};

template <typename T>
__device__ __forceinline__ Vec<T> splat(T x) {
  Vec<T> out;
#pragma unroll
  for (int j = 0; j < kVec; ++j) out.v[j] = x;
  return out;
}

template <int NIN, typename Out, typename F, typename A, typename B, typename C>
__device__ __forceinline__ Out invoke(const F& f, const A& a, const B& b, const C& c) {
  if constexpr (NIN == 0) return f();
  else if constexpr (NIN == 1) return f(a);
  else if constexpr (NIN == 2) return f(a, b);
  else return f(a, b, c);
}

template <typename F, int NIN, typename Out, typename A, typename B, typename C>
__global__ void elementwise_contiguous(ContiguousArgs<NIN + 1> args, int64_t n, F f) {
  Out* out = reinterpret_cast<Out*>(args.base[0]);
  const A* pa = reinterpret_cast<const A*>(args.base[NIN >= 1 ? 1 : 0]);
  const B* pb = reinterpret_cast<const B*>(args.base[NIN >= 2 ? 2 : 0]);
  const C* pc = reinterpret_cast<const C*>(args.base[NIN >= 3 ? 3 : 0]);
  const bool a_scalar = args.scalar_mask & 1u, b_scalar = args.scalar_mask & 2u,
             c_scalar = args.scalar_mask & 4u;
  // Broadcast scalars are read once per thread.
  A sa{};
  B sb{};
  C sc{};
  if constexpr (NIN >= 1) if (a_scalar) sa = pa[0];
  if constexpr (NIN >= 2) if (b_scalar) sb = pb[0];
  if constexpr (NIN >= 3) if (c_scalar) sc = pc[0];

  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (args.vectorized) {
    const int64_t vectors = n / kVec;
    for (int64_t first = thread; first < vectors; first += threads * kUnroll) {
      Vec<A> va[kUnroll];
      Vec<B> vb[kUnroll];
      Vec<C> vc[kUnroll];
      // All loads first, so that they are in flight together.
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t v = first + u * threads;
        if (v >= vectors) continue;
        if constexpr (NIN >= 1) va[u] = a_scalar ? splat(sa) : reinterpret_cast<const Vec<A>*>(pa)[v];
        if constexpr (NIN >= 2) vb[u] = b_scalar ? splat(sb) : reinterpret_cast<const Vec<B>*>(pb)[v];
        if constexpr (NIN >= 3) vc[u] = c_scalar ? splat(sc) : reinterpret_cast<const Vec<C>*>(pc)[v];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t v = first + u * threads;
        if (v >= vectors) continue;
        Vec<Out> result;
#pragma unroll
        for (int j = 0; j < kVec; ++j)
          result.v[j] = invoke<NIN, Out>(f, va[u].v[j], vb[u].v[j], vc[u].v[j]);
        reinterpret_cast<Vec<Out>*>(out)[v] = result;
      }
    }
    done = vectors * kVec;
  }
  for (int64_t i = done + thread; i < n; i += threads) {
    A a{};
    B b{};
    C c{};
    if constexpr (NIN >= 1) a = a_scalar ? sa : pa[i];
    if constexpr (NIN >= 2) b = b_scalar ? sb : pb[i];
    if constexpr (NIN >= 3) c = c_scalar ? sc : pc[i];
    out[i] = invoke<NIN, Out>(f, a, b, c);
  }
}

template <typename F, int NIN, typename Out, typename A, typename B, typename C>
__global__ void elementwise_strided(MergedLayout<NIN + 1> layout, int64_t n, F f) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += threads) {
    int64_t offset[NIN + 1];
    element_offsets(layout, i, offset);
    A a{};
    B b{};
    C c{};
    if constexpr (NIN >= 1) a = *reinterpret_cast<const A*>(layout.base[1] + offset[1]);
    if constexpr (NIN >= 2) b = *reinterpret_cast<const B*>(layout.base[2] + offset[2]);
    if constexpr (NIN >= 3) c = *reinterpret_cast<const C*>(layout.base[3] + offset[3]);
    *reinterpret_cast<Out*>(layout.base[0] + offset[0]) = invoke<NIN, Out>(f, a, b, c);
  }
}

constexpr int kRowSegment = 32 * 8;  // elements of a row a warp takes at once: 8 accesses a lane in flight

// A warp a segment of a row; `segments` a row.
template <typename F, int NIN, typename Out, typename A, typename B, typename C>
__global__ void elementwise_rows(MergedLayout<NIN + 1> layout, int64_t rows, int64_t segments, F f) {
  constexpr int N = NIN + 1;
  const int64_t inner = layout.sizes[0];
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  for (int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32; item < rows * segments;
       item += warps) {
    const int64_t row = item / segments, first = (item - row * segments) * kRowSegment;
    int64_t offset[N];
    element_offsets(layout, row * inner, offset);  // the row's first element
    char* p[N];
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = layout.base[k] + offset[k];
    A a[8] = {};
    B b[8] = {};
    C c[8] = {};
#pragma unroll
    for (int u = 0; u < 8; ++u) {  // all loads first, so that they are in flight together
      const int64_t i = first + lane + 32 * u;
      if (i >= inner) break;
      if constexpr (NIN >= 1) a[u] = *reinterpret_cast<const A*>(p[1] + i * layout.strides[0][1]);
      if constexpr (NIN >= 2) b[u] = *reinterpret_cast<const B*>(p[2] + i * layout.strides[0][2]);
      if constexpr (NIN >= 3) c[u] = *reinterpret_cast<const C*>(p[3] + i * layout.strides[0][3]);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t i = first + lane + 32 * u;
      if (i >= inner) break;
      reinterpret_cast<Out*>(p[0])[i] = invoke<NIN, Out>(f, a[u], b[u], c[u]);
    }
  }
}

// Whether the rows kernel takes a layout: a warp or more along an innermost
// dim that every operand steps through densely (out) or densely or not at all
// (the inputs), with outer dims left.
template <int N>
bool rows_fit(const MergedLayout<N>& layout, const int64_t (&element)[4]) {
  if (layout.dims < 2 || layout.sizes[0] < 32) return false;
  for (int k = 0; k < N; ++k)
    if (layout.strides[0][k] != element[k] && (k == 0 || layout.strides[0][k] != 0)) return false;
  return true;
}

// out[i] = f(inputs[0][i], ...) for every element i of out, on out's device
// and current stream. A, B, C are the inputs' element types (unused ones stay char).
template <int NIN, typename Out, typename A = char, typename B = char, typename C = char, typename F>
void launch_elementwise(const Tensor& out, const std::array<const Tensor*, NIN>& inputs, const F& f) {
  static_assert(NIN >= 0 && NIN <= 3, "elementwise ops take up to three inputs");
  constexpr int N = NIN + 1;
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  std::array<const Tensor*, N> operands{};
  operands[0] = &out;
  for (int k = 0; k < NIN; ++k) operands[k + 1] = inputs[k];
  const MergedLayout<N> layout = merge_dims<N>(operands, out.shape());
  const int64_t element[4] = {sizeof(Out), sizeof(A), sizeof(B), sizeof(C)};

  // Contiguous when one dim (or none) is left, out is dense and each input
  // is dense or a broadcast scalar.
  bool contiguous = layout.dims <= 1;
  if (layout.dims == 1) {
    contiguous = layout.strides[0][0] == element[0];
    for (int k = 1; k < N && contiguous; ++k)
      contiguous = layout.strides[0][k] == element[k] || layout.strides[0][k] == 0;
  }
  if (contiguous) {
    ContiguousArgs<N> args;
    bool aligned = n >= kVec;
    for (int k = 0; k < N; ++k) {
      args.base[k] = layout.base[k];
      const bool scalar = k > 0 && (layout.dims == 0 || layout.strides[0][k] == 0);
      if (scalar) args.scalar_mask |= 1u << (k - 1);
      else aligned = aligned && reinterpret_cast<uintptr_t>(layout.base[k]) % (kVec * element[k]) == 0;
    }
    args.vectorized = aligned;
    const int64_t items = aligned ? ceil_div(n, kVec * kUnroll) : n;
    elementwise_contiguous<F, NIN, Out, A, B, C><<<ctx.grid(items), kBlockSize, 0, ctx.stream>>>(args, n, f);
  } else if (rows_fit(layout, element)) {
    const int64_t rows = n / layout.sizes[0], segments = ceil_div(layout.sizes[0], kRowSegment);
    elementwise_rows<F, NIN, Out, A, B, C>
        <<<ctx.grid(rows * segments * 32), kBlockSize, 0, ctx.stream>>>(layout, rows, segments, f);
  } else {
    elementwise_strided<F, NIN, Out, A, B, C><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(layout, n, f);
  }
  LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
}

}  // namespace loom::cuda
