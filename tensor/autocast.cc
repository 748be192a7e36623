#include "tensor/autocast.h"

namespace loom {
namespace {

thread_local std::optional<DType> current;

}  // namespace

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(current) {
  LOOM_CHECK(!dtype || is_16bit_floating(*dtype), "autocast: expected kBFloat16 or kFloat16, got ", *dtype);
  current = dtype;
}

AutocastGuard::~AutocastGuard() { current = previous_; }

std::optional<DType> autocast_dtype() { return current; }

std::optional<DType> autocast_dtype_for(const std::string& precision) {
  if (precision == "fp32") return std::nullopt;
  if (precision == "bf16") return kBFloat16;
  if (precision == "fp16") return kFloat16;
  if (precision == "fp8") return kBFloat16;  // the Linear layers converted apart (nn/float8_training.h)
  LOOM_FAIL("precision '", precision, "': expected fp32, bf16, fp16 or fp8");
}

bool autocast_wants_low(std::initializer_list<Tensor> tensors) {
  if (!current) return false;
  for (const Tensor& t : tensors)
    if (t.defined() && is_floating(t.dtype()) && t.dtype() != *current) return true;
  return false;
}

bool autocast_wants_float32(std::initializer_list<Tensor> tensors) {
  if (!current) return false;
  for (const Tensor& t : tensors)
    if (t.defined() && is_16bit_floating(t.dtype())) return true;
  return false;
}

Tensor autocast_to_low(const Tensor& t) {
  return current && t.defined() && is_floating(t.dtype()) && t.dtype() != *current ? t.to(*current) : t;
}

Tensor autocast_to_float32(const Tensor& t) {
  return t.defined() && is_16bit_floating(t.dtype()) ? t.to(kFloat32) : t;
}

}  // namespace loom
