// Owners of cuBLASLt's descriptors (a matmul, a matrix layout, a
// preference), destroyed at scope exit, also on a throw; and set(), which
// sets one attribute of a descriptor from a typed value. Shared by the
// cuBLASLt calls: matmul_lt.cc (a product with its bias) and
// float8_matmul.cc (the float8 product).
//
//   MatmulDesc desc;
//   CUBLAS_CHECK(cublasLtMatmulDescCreate(desc.address(), CUBLAS_COMPUTE_32F, CUDA_R_32F));
//   set(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(CUBLAS_OP_T));
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "tensor/cuda/cuda_check.h"

namespace loom::cuda {

template <typename Descriptor, cublasStatus_t (*Destroy)(Descriptor)>
class LtDescriptor {
 public:
  LtDescriptor() = default;
  LtDescriptor(const LtDescriptor&) = delete;
  LtDescriptor& operator=(const LtDescriptor&) = delete;
  ~LtDescriptor() {
    if (descriptor_ != nullptr) Destroy(descriptor_);
  }
  Descriptor* address() { return &descriptor_; }
  Descriptor get() const { return descriptor_; }

 private:
  Descriptor descriptor_ = nullptr;
};

using MatmulDesc = LtDescriptor<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using MatrixLayout = LtDescriptor<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtDescriptor<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// The attribute's value is copied from `value`, whose type must be the one
// cublasLt.h names for the attribute (int32_t, uint32_t, a pointer, ...).
template <typename T>
void set(const MatmulDesc& desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.get(), attribute, &value, sizeof(value)));
}

template <typename T>
void set(const Preference& preference, cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.get(), attribute, &value, sizeof(value)));
}

// Makes the preference every loom product asks for: at most
// `workspace_bytes` of workspace, and split-K partial sums added in FP32,
// never in a 16-bit output type, so that a product rounds once (as the
// cuBLAS handle, handles.cc).
inline void make_exact_sum_preference(Preference& preference, size_t workspace_bytes) {
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(preference.address()));
  set(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(workspace_bytes));
  set(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
      static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_MASK & ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE));
}

}  // namespace loom::cuda
