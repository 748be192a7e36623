// Argument checks shared by the fused ops of nn/functional that take
// several tensors and compute in one dtype (the LSTM cell and layer).
#pragma once

#include <functional>
#include <initializer_list>

#include "tensor/tensor.h"

namespace loom::nn::functional {

// The dtype `op` computes `tensors` in: their promoted dtype, which must be
// floating. All must be on one device.
inline DType promoted_floating_dtype(const char* op, std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
  const Tensor& first = *tensors.begin();
  DType dtype = first.dtype();
  for (const Tensor& t : tensors) {
    LOOM_CHECK(t.device() == first.device(), op, ": tensors on different devices: ", first.device(), " and ",
               t.device());
    dtype = promote_types(dtype, t.dtype());
  }
  LOOM_CHECK(is_floating(dtype), op, ": expected floating-point tensors, got ", dtype);
  return dtype;
}

}  // namespace loom::nn::functional
