// CUDA indexing kernels: index_select / index_add (embedding lookup and its
// gradient) and gather / scatter_add. One thread per element moved; the adds
// use atomics because indices may repeat. Every index is checked where it is
// used: a bad one is skipped and reported through index_error.h, which turns
// it into a loom::Error at the next synchronising call.
#include <cstdint>
#include <type_traits>

#include "tensor/creation.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/index_error.h"
#include "tensor/cuda/launch.h"

namespace loom::cuda {
namespace {

// The grid-stride loop every kernel here uses.
#define LOOM_FOR_EACH(i, n)                                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);       \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// atomicAdd for every numeric dtype: float, double, bfloat16 and float16
// natively (sm_90; the 16-bit adds round at each add, which is why the adds
// here go into float: add_in_compute_type), int64 as unsigned
// 64-bit (the same bits in two's complement); uint8 through a
// compare-and-swap on its aligned 32-bit word.
template <typename T>
__device__ __forceinline__ void atomic_add(T* address, T value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, __nv_bfloat16> ||
                std::is_same_v<T, __half>) {
    atomicAdd(address, value);
  } else if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(address), static_cast<unsigned long long>(value));
  } else {
    static_assert(std::is_same_v<T, uint8_t>, "atomic_add: unsupported type");
    auto* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(address) & ~uintptr_t{3});
    const unsigned int shift = (reinterpret_cast<uintptr_t>(address) & 3u) * 8u;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const unsigned int byte = ((assumed >> shift) + value) & 0xffu;
      old = atomicCAS(word, assumed, (assumed & ~(0xffu << shift)) | (byte << shift));
    } while (old != assumed);
  }
}

// Element-sized stand-ins: index_select and gather only move bytes.
template <size_t N> struct Bits;
template <> struct Bits<1> { using type = uint8_t; };
template <> struct Bits<2> { using type = uint16_t; };
template <> struct Bits<4> { using type = uint32_t; };
template <> struct Bits<8> { using type = uint64_t; };

// out (outer, count, inner) = a (outer, size, inner) at rows index[count].
template <typename T>
__global__ void index_select_kernel(const T* a, const int64_t* index, T* out, int64_t n, int64_t count,
                                    int64_t inner, int64_t size, int dim, IndexErrorSlot error) {
  LOOM_FOR_EACH(p, n) {
    const int64_t c = p % inner, i = (p / inner) % count, o = p / (inner * count);
    const int64_t row = index[i];
    if (row < 0 || row >= size) {
      report_bad_index(error, IndexOpCode::IndexSelect, dim, row, size);
      continue;
    }
    out[p] = a[(o * size + row) * inner + c];
  }
}

// out (outer, size, inner) at rows index[count] += src (outer, count, inner).
// A: what out holds (the compute type); S: what src holds.
template <typename A, typename S>
__global__ void index_add_kernel(A* out, const int64_t* index, const S* src, int64_t n, int64_t count,
                                 int64_t inner, int64_t size, int dim, IndexErrorSlot error) {
  LOOM_FOR_EACH(p, n) {
    const int64_t c = p % inner, i = (p / inner) % count, o = p / (inner * count);
    const int64_t row = index[i];
    if (row < 0 || row >= size) {
      report_bad_index(error, IndexOpCode::IndexAdd, dim, row, size);
      continue;
    }
    atomic_add(out + (o * size + row) * inner + c, widen(src[p]));
  }
}

// Shape and strides of the index tensor and of the tensor it indexes, for
// turning a linear position of `index` into an offset of the other.
struct GatherGeometry {
  int dims = 0;
  int64_t sizes[kMaxDims] = {};    // index's shape
  int64_t strides[kMaxDims] = {};  // the indexed tensor's strides
  int dim = 0;
  int64_t dim_size = 0;
};

__device__ __forceinline__ int64_t offset_with(const GatherGeometry& g, int64_t linear, int64_t dim_index) {
  int64_t offset = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d >= g.dims) continue;
    const int64_t i = linear % g.sizes[d];
    linear /= g.sizes[d];
    offset += (d == g.dim ? dim_index : i) * g.strides[d];
  }
  return offset;
}

// out[p] = a[... index[p] along dim ...]; out and index contiguous, a any strides.
template <typename T>
__global__ void gather_kernel(const T* a, const int64_t* index, T* out, int64_t n, GatherGeometry g,
                              IndexErrorSlot error) {
  LOOM_FOR_EACH(p, n) {
    const int64_t at = index[p];
    if (at < 0 || at >= g.dim_size) {
      report_bad_index(error, IndexOpCode::Gather, g.dim, at, g.dim_size);
      continue;
    }
    out[p] = a[offset_with(g, p, at)];
  }
}

template <typename A, typename S>
__global__ void scatter_add_kernel(A* out, const int64_t* index, const S* src, int64_t n, GatherGeometry g,
                                   IndexErrorSlot error) {
  LOOM_FOR_EACH(p, n) {
    const int64_t at = index[p];
    if (at < 0 || at >= g.dim_size) {
      report_bad_index(error, IndexOpCode::ScatterAdd, g.dim, at, g.dim_size);
      continue;
    }
    atomic_add(out + offset_with(g, p, at), widen(src[p]));
  }
}

// Runs add(acc), where acc is the tensor the adds go into: `out` itself, or
// for 16-bit floats a float32 copy, rounded back into `out` once at the end,
// as the CPU does. (An embedding's gradient adds many rows into one; rounded
// at each add, a bfloat16 sum of ones stops growing at 256.)
template <typename S, typename Add>
void add_in_compute_type(const Tensor& out, Add add) {
  using A = compute_of_t<S>;
  if constexpr (std::is_same_v<A, S>) {
    add(out);
  } else {
    Tensor acc = empty(out.shape(), {.dtype = storage_dtype<A>(), .device = out.device()});
    convert_on_device(out, acc);
    add(acc);
    convert_on_device(acc, out);
  }
}

void split_around(const Tensor& t, int dim, int64_t& outer, int64_t& inner) {
  outer = inner = 1;
  for (int d = 0; d < dim; ++d) outer *= t.size(d);
  for (int d = dim + 1; d < t.dim(); ++d) inner *= t.size(d);
}

GatherGeometry geometry(const Tensor& index, const Tensor& indexed, int dim) {
  GatherGeometry g;
  g.dims = index.dim();
  for (int d = 0; d < index.dim(); ++d) {
    g.sizes[d] = index.size(d);
    g.strides[d] = indexed.stride(d);
  }
  g.dim = dim;
  g.dim_size = indexed.size(dim);
  return g;
}

// launch(B{}) with B the unsigned type of an element's size: the kernels
// that only move elements move bits.
template <typename Launch>
void with_element_bits(size_t element_size, Launch&& launch) {
  switch (element_size) {
    case 1: return launch(Bits<1>::type{});
    case 2: return launch(Bits<2>::type{});
    case 4: return launch(Bits<4>::type{});
    case 8: return launch(Bits<8>::type{});
  }
  LOOM_INTERNAL_ASSERT(false, "no element of ", element_size, " bytes");
}

}  // namespace

void CudaBackend::index_select(const Tensor& a, int dim, const Tensor& index, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  int64_t outer, inner;
  split_around(a, dim, outer, inner);
  const IndexErrorSlot error = index_error_slot(ctx.device);
  with_element_bits(a.element_size(), [&](auto tag) {
    using B = decltype(tag);
    index_select_kernel<B><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(
        static_cast<const B*>(a.raw_data()), index.data_ptr<int64_t>(), static_cast<B*>(out.raw_data()), n,
        index.numel(), inner, a.size(dim), dim, error);
  });
  LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
}

void CudaBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  const int64_t n = src.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  int64_t outer, inner;
  split_around(out, dim, outer, inner);
  const IndexErrorSlot error = index_error_slot(ctx.device);
  dispatch_numeric_or_16bit(out.dtype(), "index_add", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using A = decltype(compute);
    add_in_compute_type<S>(out, [&](const Tensor& acc) {
      index_add_kernel<A, S><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(
          static_cast<A*>(acc.raw_data()), index.data_ptr<int64_t>(), static_cast<const S*>(src.raw_data()), n,
          index.numel(), inner, out.size(dim), dim, error);
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    });
  });
}

void CudaBackend::gather(const Tensor& a, int dim, const Tensor& index, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  const IndexErrorSlot error = index_error_slot(ctx.device);
  const GatherGeometry g = geometry(index, a, dim);
  with_element_bits(a.element_size(), [&](auto tag) {
    using B = decltype(tag);
    gather_kernel<B><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(
        static_cast<const B*>(a.raw_data()), index.data_ptr<int64_t>(), static_cast<B*>(out.raw_data()), n, g,
        error);
  });
  LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
}

void CudaBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  const int64_t n = index.numel();
  if (n == 0) return;
  LaunchContext ctx(out);
  const IndexErrorSlot error = index_error_slot(ctx.device);
  dispatch_numeric_or_16bit(out.dtype(), "scatter_add", [&](auto storage, auto compute) {
    using S = decltype(storage);
    using A = decltype(compute);
    add_in_compute_type<S>(out, [&](const Tensor& acc) {
      const GatherGeometry g = geometry(index, acc, dim);  // acc's strides: a copy of out is contiguous
      scatter_add_kernel<A, S><<<ctx.grid(n), kBlockSize, 0, ctx.stream>>>(
          static_cast<A*>(acc.raw_data()), index.data_ptr<int64_t>(), static_cast<const S*>(src.raw_data()), n, g,
          error);
      LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
    });
  });
}

}  // namespace loom::cuda
