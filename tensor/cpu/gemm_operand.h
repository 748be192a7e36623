// A matrix operand of the CPU's products (gemm.h, packed_gemm.h), read
// where it lies: row-major (element (i, j) at data[i ld + j]) or
// column-major (at data[j ld + i]); a transposed view of a row-major matrix
// is column-major with the same leading dimension.
#pragma once

#include <cstdint>

namespace loom::cpu {

template <typename T>
struct GemmOperand {
  const T* data;
  int64_t ld;
  bool row_major;
};

}  // namespace loom::cpu
