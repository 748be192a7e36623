// Mixed precision as torch.autocast: inside a scope, the ops that gain from
// 16-bit arithmetic (matmul, linear, conv2d and scaled_dot_product_attention)
// run in bfloat16 or float16, and the ops that need float32's range or
// accuracy (softmax, log_softmax, cross-entropy, layer and batch norm, sum
// and mean) run in float32, whatever dtype their inputs come in. Other ops
// take their inputs' dtype (attention_softmax too: it computes in float32
// inside and rounds once). Parameters stay float32: the casts are ops, so
// their gradients reach the float32 parameters in float32, where the
// optimizer updates them (the "master weights").
//
// Backward runs with autocast off: each gradient takes its forward's dtype
// (a checkpointed segment replays under the autocast it first ran under).
//
//   Tensor loss;
//   {
//     AutocastGuard autocast(kBFloat16);
//     loss = cross_entropy(model->forward(x), y);  // Linear in bf16, the loss in float32
//   }
//   loss.backward();  // float32 gradients for the float32 parameters
//
// Unlike PyTorch, a weight is cast again at every use (no cast cache).
#pragma once

#include <initializer_list>
#include <optional>
#include <string>

#include "tensor/tensor.h"

namespace loom {

class AutocastGuard {
 public:
  // dtype: kBFloat16 or kFloat16 to turn autocast on, nullopt to turn it off.
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// The 16-bit dtype of this thread's autocast scope; nullopt outside one.
std::optional<DType> autocast_dtype();

// Whether an op that runs in 16 bits under autocast must cast any of `tensors`
// (autocast is on, and a defined floating tensor is not in its dtype).
bool autocast_wants_low(std::initializer_list<Tensor> tensors);
// Whether an op that runs in float32 under autocast must cast any of `tensors`
// (autocast is on, and a defined tensor is a 16-bit float).
bool autocast_wants_float32(std::initializer_list<Tensor> tensors);

// The autocast dtype a --precision flag names: "fp32" none, "bf16", "fp16";
// "fp8" is bf16 too, the Linear layers being converted to float8 on their
// own (nn/float8_training.h).
std::optional<DType> autocast_dtype_for(const std::string& precision);

// `t` in the autocast dtype if it is floating (undefined stays undefined).
Tensor autocast_to_low(const Tensor& t);
// `t` in float32 if it is a 16-bit float.
Tensor autocast_to_float32(const Tensor& t);

}  // namespace loom
