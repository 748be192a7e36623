// Strided loops over several tensors of one shape: the engine of every CPU
// elementwise kernel.
//
// Operands share a shape (inputs already broadcast with stride-0 dims). Dims
// that are contiguous for every operand are merged (merge_dims, which the
// CUDA engine runs too), so most calls become one flat inner loop. The
// caller's `inner(ptrs, byte_strides, n)` processes n elements starting at
// ptrs, stepping byte_strides[i] for operand i; it can test the strides for
// the contiguous case and use vector code there.
//
//   for_each_strided<2>({&out, &in}, [&](char** p, const int64_t* s, int64_t n) { ... });
#pragma once

#include <array>
#include <cstdint>

#include "tensor/cpu/parallel.h"
#include "tensor/merged_layout.h"
#include "tensor/tensor.h"

namespace loom::cpu {

// Calls inner() on the elements [begin, end) of the layout in row-major order.
template <int N, typename Inner>
void run_range(const MergedLayout<N>& layout, int64_t begin, int64_t end, Inner& inner) {
  const int dims = layout.dims;
  if (dims == 0) {  // a single element
    std::array<char*, N> ptrs;
    for (int k = 0; k < N; ++k) ptrs[k] = layout.base[k];
    std::array<int64_t, N> strides{};
    inner(ptrs.data(), strides.data(), int64_t{1});
    return;
  }
  const int64_t inner_size = layout.sizes[0];
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = layout.strides[0][k];

  // Multi-index of `begin`, innermost first.
  std::array<int64_t, kMaxDims> index{};
  int64_t rest = begin;
  for (int d = 0; d < dims; ++d) {
    index[d] = rest % layout.sizes[d];
    rest /= layout.sizes[d];
  }
  int64_t position = begin;
  while (position < end) {
    std::array<char*, N> ptrs;
    for (int k = 0; k < N; ++k) {
      char* p = layout.base[k];
      for (int d = 0; d < dims; ++d) p += index[d] * layout.strides[d][k];
      ptrs[k] = p;
    }
    int64_t count = std::min(inner_size - index[0], end - position);
    inner(ptrs.data(), inner_strides.data(), count);
    position += count;
    // Advance the multi-index past the row just done.
    index[0] += count;
    for (int d = 0; d + 1 < dims && index[d] == layout.sizes[d]; ++d) {
      index[d] = 0;
      ++index[d + 1];
    }
  }
}

// Runs inner() over every element of `shape`, in parallel chunks when large.
template <int N, typename Inner>
void for_each_strided(const std::array<const Tensor*, N>& operands, const Shape& shape,
                      Inner&& inner) {
  const MergedLayout<N> layout = merge_dims<N>(operands, shape);
  parallel_for(numel(shape), kParallelGrain,
               [&](int64_t begin, int64_t end) { run_range<N>(layout, begin, end, inner); });
}

}  // namespace loom::cpu
