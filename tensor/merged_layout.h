// The operands of an elementwise kernel in as few dims as they allow: the
// layout both backends' elementwise engines run over (tensor/cpu/loops.h,
// tensor/cuda/loops.cuh).
//
// Operands share one shape (inputs already broadcast, with stride-0 dims).
// Size-1 dims are dropped, and a dim merges into the one inside it when
// every operand steps exactly over the inner one, so a contiguous or
// broadcast-scalar operation becomes one dim. Sizes and byte strides run
// innermost first. A plain struct: the CUDA kernels take it by value.
//
//   MergedLayout<2> layout = merge_dims<2>({&out, &in}, out.shape());
//   int64_t offset[2];
//   element_offsets(layout, i, offset);   // element i of out and in, in bytes
#pragma once

#include <array>
#include <cstdint>

#include "tensor/host_device.h"
#include "tensor/tensor.h"

namespace loom {

template <int N>
struct MergedLayout {
  int dims = 0;                       // 0: a single element
  int64_t sizes[kMaxDims] = {};       // innermost first
  int64_t strides[kMaxDims][N] = {};  // bytes: operand k steps strides[d][k] along dim d
  char* base[N] = {};
};

template <int N>
MergedLayout<N> merge_dims(const std::array<const Tensor*, N>& operands, const Shape& shape) {
  MergedLayout<N> layout;
  for (int k = 0; k < N; ++k) layout.base[k] = static_cast<char*>(operands[k]->raw_data());
  for (int d = shape.size() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    int64_t stride[N];
    for (int k = 0; k < N; ++k) stride[k] = operands[k]->stride(d) * static_cast<int64_t>(operands[k]->element_size());
    bool merge = layout.dims > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = stride[k] == layout.strides[layout.dims - 1][k] * layout.sizes[layout.dims - 1];
    if (merge) {
      layout.sizes[layout.dims - 1] *= shape[d];
    } else {
      for (int k = 0; k < N; ++k) layout.strides[layout.dims][k] = stride[k];
      layout.sizes[layout.dims++] = shape[d];
    }
  }
  return layout;
}

// q = n / d, r = n % d, in 32-bit arithmetic when both fit (much cheaper on
// the GPU than 64-bit division).
LOOM_HOST_DEVICE void divmod(uint64_t n, uint64_t d, uint64_t& q, uint64_t& r) {
  if (((n | d) >> 32) == 0) {
    const uint32_t q32 = static_cast<uint32_t>(n) / static_cast<uint32_t>(d);
    q = q32;
    r = static_cast<uint32_t>(n) - q32 * static_cast<uint32_t>(d);
  } else {
    q = n / d;
    r = n - q * d;
  }
}

// Byte offsets of element `linear` (row-major over the layout) in each operand.
template <int N>
LOOM_HOST_DEVICE void element_offsets(const MergedLayout<N>& layout, int64_t linear, int64_t (&offset)[N]) {
  LOOM_UNROLL
  for (int k = 0; k < N; ++k) offset[k] = 0;
  uint64_t rest = static_cast<uint64_t>(linear);
  LOOM_UNROLL
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == layout.dims) break;
    uint64_t q, r;
    divmod(rest, static_cast<uint64_t>(layout.sizes[d]), q, r);
    rest = q;
    LOOM_UNROLL
    for (int k = 0; k < N; ++k) offset[k] += static_cast<int64_t>(r) * layout.strides[d][k];
  }
}

}  // namespace loom
