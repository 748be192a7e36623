// Strided loops over several tensors of one shape: the engine of every CPU
// elementwise kernel.
//
// Operands share a shape (inputs already broadcast with stride-0 dims). Dims
// that are contiguous for every operand are merged, so most calls become one
// flat inner loop. The caller's `inner(ptrs, byte_strides, n)` processes n
// elements starting at ptrs, stepping byte_strides[i] for operand i; it can
// test the strides for the contiguous case and use vector code there.
//
//   for_each_strided<2>({&out, &in}, [&](char** p, const int64_t* s, int64_t n) { ... });
#pragma once

#include <array>
#include <cstdint>

#include "tensor/cpu/parallel.h"
#include "tensor/tensor.h"

namespace loom::cpu {

template <int N>
struct StridedLayout {
  Shape shape;
  std::array<std::array<int64_t, kMaxDims>, N> byte_strides{};
  std::array<char*, N> base{};
};

// Builds the layout of `operands` (all of `shape`), merging contiguous dims
// and dropping size-1 dims.
template <int N>
StridedLayout<N> make_layout(const std::array<const Tensor*, N>& operands, const Shape& shape) {
  StridedLayout<N> layout;
  for (int k = 0; k < N; ++k) layout.base[k] = static_cast<char*>(operands[k]->raw_data());
  // Walk from the innermost dim outwards, merging into the current dim when
  // every operand steps over it exactly.
  int out_dims = 0;
  std::array<int64_t, kMaxDims> sizes{};
  for (int d = shape.size() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    bool merge = out_dims > 0;
    for (int k = 0; k < N && merge; ++k) {
      int64_t stride = operands[k]->stride(d) * static_cast<int64_t>(operands[k]->element_size());
      merge = stride == layout.byte_strides[k][out_dims - 1] * sizes[out_dims - 1];
    }
    if (merge) {
      sizes[out_dims - 1] *= shape[d];
    } else {
      for (int k = 0; k < N; ++k)
        layout.byte_strides[k][out_dims] =
            operands[k]->stride(d) * static_cast<int64_t>(operands[k]->element_size());
      sizes[out_dims++] = shape[d];
    }
  }
  // `sizes` runs innermost first; store outermost first like a Shape.
  for (int i = out_dims - 1; i >= 0; --i) layout.shape.push_back(sizes[i]);
  for (int k = 0; k < N; ++k) {
    std::array<int64_t, kMaxDims> reversed{};
    for (int i = 0; i < out_dims; ++i) reversed[i] = layout.byte_strides[k][out_dims - 1 - i];
    layout.byte_strides[k] = reversed;
  }
  return layout;
}

// Calls inner() on the elements [begin, end) of the layout in row-major order.
template <int N, typename Inner>
void run_range(const StridedLayout<N>& layout, int64_t begin, int64_t end, Inner& inner) {
  const int dims = layout.shape.size();
  if (dims == 0) {  // a single element
    std::array<char*, N> ptrs = layout.base;
    std::array<int64_t, N> strides{};
    inner(ptrs.data(), strides.data(), int64_t{1});
    return;
  }
  const int64_t inner_size = layout.shape[dims - 1];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = layout.byte_strides[k][dims - 1];

  // Multi-index of `begin`.
  std::array<int64_t, kMaxDims> index{};
  int64_t rest = begin;
  for (int d = dims - 1; d >= 0; --d) {
    index[d] = rest % layout.shape[d];
    rest /= layout.shape[d];
  }
  int64_t position = begin;
  while (position < end) {
    std::array<char*, N> ptrs;
    for (int k = 0; k < N; ++k) {
      char* p = layout.base[k];
      for (int d = 0; d < dims; ++d) p += index[d] * layout.byte_strides[k][d];
      ptrs[k] = p;
    }
    int64_t count = std::min(inner_size - index[dims - 1], end - position);
    inner(ptrs.data(), inner_strides.data(), count);
    position += count;
    // Advance the multi-index past the row just done.
    index[dims - 1] += count;
    for (int d = dims - 1; d > 0 && index[d] == layout.shape[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

// Runs inner() over every element of `shape`, in parallel chunks when large.
template <int N, typename Inner>
void for_each_strided(const std::array<const Tensor*, N>& operands, const Shape& shape,
                      Inner&& inner) {
  StridedLayout<N> layout = make_layout<N>(operands, shape);
  parallel_for(numel(shape), kParallelGrain,
               [&](int64_t begin, int64_t end) { run_range<N>(layout, begin, end, inner); });
}

}  // namespace loom::cpu
