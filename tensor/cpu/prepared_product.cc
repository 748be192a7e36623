// The CPU's prepared product: a float32 right operand packed once into
// PackedMatrix's panels, for the many products of a recurrence.
#include <memory>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm_avx512.h"
#include "tensor/cpu/packed_gemm.h"
#include "tensor/creation.h"

namespace loom::cpu {
namespace {

// b read in place where one of its strides is 1 (a transposed view is
// column-major), else from a contiguous copy.
PackedMatrix pack(const Tensor& b) {
  const Tensor m = b.stride(0) == 1 || b.stride(1) == 1 ? b : contiguous_copy(b);
  const bool row_major = m.stride(1) == 1;
  return PackedMatrix({m.data_ptr<float>(), row_major ? m.stride(0) : m.stride(1), row_major}, m.size(0), m.size(1));
}

class PackedProduct : public Backend::PreparedProduct {
 public:
  explicit PackedProduct(const Tensor& b) : b_(b), packed_(pack(b)) {}

  void run(const Tensor& a, const Tensor& out) const override {
    check_prepared_product_run(a, b_, out);
    const Tensor rows = a.stride(1) == 1 ? a : contiguous_copy(a);
    packed_.multiply({rows.data_ptr<float>(), rows.stride(0), true}, rows.size(0), out.data_ptr<float>(), out.size(1));
  }

 private:
  Tensor b_;  // for the checks: its shape, dtype and device
  PackedMatrix packed_;
};

}  // namespace

std::unique_ptr<Backend::PreparedProduct> CpuBackend::prepare_product(const Tensor& b) {
  // Where Eigen's AVX-512 build runs, it outruns the AVX2 micro-kernel even
  // packing at every call; other dtypes have no packed kernel.
  if (b.defined() && b.dim() == 2 && b.dtype() == kFloat32 && !avx512_gemm_enabled())
    return std::make_unique<PackedProduct>(b);
  return Backend::prepare_product(b);
}

}  // namespace loom::cpu
