// Which kernel layout the CUDA softmax takes for rows of a given length.
//
// Rows up to kMaxBlockRow elements live in registers: a warp per row up to
// 1024 elements (GROUP = 32 threads), a block of kRowBlock threads per row
// above, each thread holding ELEMS elements. Longer rows, and in backward
// (two arrays in registers) rows past kMaxBlockRowBackward, go through
// shared-memory loops instead (softmax.cu's *_long_rows kernels). Plain
// C++, apart from the kernels, so that the CPU tests check that every
// length gets a layout that holds it (tests/cuda/softmax_layout_test.cc).
//
//   with_row_config(size, [&](auto group, auto elems) {
//     kernel<S, T, decltype(group)::value, decltype(elems)::value><<<...>>>(...);
//   });
#pragma once

#include <cstdint>
#include <type_traits>

#include "tensor/error.h"

namespace loom::cuda {

constexpr int kRowBlock = 512;        // threads of the block-per-row kernels
constexpr int kMaxWarpRow = 32 * 32;  // elements a warp keeps in registers
// Elements a block keeps in registers: 32 per thread forward; the backward
// holds two arrays, and 2 x 32 doubles would spill, so it stops at 16.
constexpr int kMaxBlockRow = kRowBlock * 32;
constexpr int kMaxBlockRowBackward = kRowBlock * 16;

// Calls launch(GROUP, ELEMS), as integral constants, with the smallest
// register layout that holds rows of `size` (1 to kMaxBlockRow).
template <typename Launch>
void with_row_config(int64_t size, Launch&& launch) {
  using std::integral_constant;
  LOOM_INTERNAL_ASSERT(size >= 1 && size <= kMaxBlockRow, "softmax: no register layout for rows of ", size);
  if (size <= kMaxWarpRow) {
    const int64_t per_lane = (size + 31) / 32;
    if (per_lane <= 1) return launch(integral_constant<int, 32>(), integral_constant<int, 1>());
    if (per_lane <= 2) return launch(integral_constant<int, 32>(), integral_constant<int, 2>());
    if (per_lane <= 4) return launch(integral_constant<int, 32>(), integral_constant<int, 4>());
    if (per_lane <= 8) return launch(integral_constant<int, 32>(), integral_constant<int, 8>());
    if (per_lane <= 16) return launch(integral_constant<int, 32>(), integral_constant<int, 16>());
    return launch(integral_constant<int, 32>(), integral_constant<int, 32>());
  }
  const int64_t per_thread = (size + kRowBlock - 1) / kRowBlock;
  if (per_thread <= 4) return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 4>());
  if (per_thread <= 8) return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 8>());
  if (per_thread <= 16) return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 16>());
  return launch(integral_constant<int, kRowBlock>(), integral_constant<int, 32>());
}

// The same, for rows of 1 to kMaxBlockRowBackward: no layout holds 32 per
// thread, so rows of 513..1024, a warp's 32 per lane forward, go to a block.
template <typename Launch>
void with_backward_row_config(int64_t size, Launch&& launch) {
  LOOM_INTERNAL_ASSERT(size <= kMaxBlockRowBackward, "softmax backward: no register layout for rows of ", size);
  with_row_config(size, [&](auto group, auto elems) {
    if constexpr (decltype(elems)::value <= 16)
      launch(group, elems);
    else if constexpr (decltype(group)::value == 32)
      launch(std::integral_constant<int, kRowBlock>(), std::integral_constant<int, 4>());
    // else a block of 32 per thread: rows past kMaxBlockRowBackward, refused above
  });
}

}  // namespace loom::cuda
