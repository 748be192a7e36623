// bfloat16 and float16 on the CPU compute in float32 and round once: a
// kernel handed 16-bit tensors runs on float32 copies of them, and its
// float32 results are rounded into the 16-bit outputs. The copies cost a pass
// over each tensor, and matmul runs the float32 GEMM: correct, not fast (the
// CPU has no faster 16-bit arithmetic for loom to use).
//
//   void CpuBackend::unary(UnaryOp op, const Tensor& a, const Tensor& out, ...) {
//     if (run_in_float32({a, out}, {1}, [&](const TensorList& t) { unary(op, t[0], t[1], ...); })) return;
//     ... the float32 / float64 kernel ...
#pragma once

#include <functional>
#include <initializer_list>

#include "tensor/tensor.h"

namespace loom::cpu {

// Whether any defined tensor among `tensors` is bfloat16 or float16.
template <typename Tensors>
bool any_16bit(const Tensors& tensors) {
  for (const Tensor& t : tensors)
    if (t.defined() && is_16bit_floating(t.dtype())) return true;
  return false;
}

// A kernel's tensor arguments, by reference: this runs on every CPU kernel
// call, and copying a Tensor handle costs two atomic operations.
using TensorRefs = std::initializer_list<std::reference_wrapper<const Tensor>>;

// `tensors` with each 16-bit one replaced by a float32 copy.
TensorList widen_16bit(TensorRefs tensors);

// Rounds `wide[i]` into `tensors[i]` for each i in `outputs` that was widened.
void round_into_16bit(const TensorList& wide, TensorRefs tensors, std::initializer_list<int> outputs);

// When any of `tensors` is a 16-bit float: runs kernel(float32 stand-ins),
// rounds the stand-ins of the tensors at `outputs` (indices) back into them,
// and returns true. Outputs are copied in first too, for kernels that update
// them in place. Otherwise returns false and runs nothing (and allocates
// nothing: every CPU kernel call passes through here).
template <typename Kernel>
bool run_in_float32(TensorRefs tensors, std::initializer_list<int> outputs, Kernel&& kernel) {
  if (!any_16bit(tensors)) return false;
  const TensorList wide = widen_16bit(tensors);
  kernel(wide);
  round_into_16bit(wide, tensors, outputs);
  return true;
}

}  // namespace loom::cpu
