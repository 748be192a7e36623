// Operands whose addmm result shows how often a 16-bit result was rounded:
// once, after the bias is added (the CPU, cuBLASLt's epilogue), or twice, the
// product first and then the sum (a product and an add after it).
//
// With u the dtype's unit in the last place at 1, every element of a @ b is
// (1 + u)^2 = 1 + 2u + u^2 (exact in float32), and the bias is u / 2.
// Rounded once, 1 + 2.5u + u^2 becomes 1 + 3u. Rounded twice, the product
// becomes 1 + 2u, and 1 + 2.5u is a tie that rounds to even: 1 + 2u.
#pragma once

#include "tensor/ops.h"

namespace loom::testing {

struct RoundingProbe {
  Tensor a, b, bias;     // (n, n), (n, n), (n), on the CPU
  double rounded_once;   // every element of addmm(bias, a, b) rounded once
  double rounded_twice;  // ... rounded after the product and after the add
};

inline RoundingProbe rounding_probe(DType dtype, int64_t n) {
  const double u = dtype == kBFloat16 ? 1.0 / 128 : 1.0 / 1024;  // 7 or 10 fraction bits
  RoundingProbe probe{zeros({n, n}, {.dtype = dtype}), zeros({n, n}, {.dtype = dtype}),
                      full({n}, u / 2, {.dtype = dtype}), 1 + 3 * u, 1 + 2 * u};
  probe.a.narrow(1, 0, 1).fill_(1 + u);  // one term of each dot product is (1 + u)^2, the rest 0
  probe.b.narrow(0, 0, 1).fill_(1 + u);
  return probe;
}

}  // namespace loom::testing
