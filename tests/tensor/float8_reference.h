// References for the float8 tests (CPU and CUDA): the codes a cast must
// write, computed element by element on the host, and the product of two
// float8 matrices in float64 with a bound on what float32 accumulation may
// add to its error.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/float8.h"
#include "tensor/ops.h"

namespace loom::testing {

// The codes of x (rows, cols) * scale, scale from max |x| (float8_rounding.h),
// row by row; `transposed` gives them in (cols, rows) order instead.
inline std::vector<uint8_t> expected_codes(const Tensor& x, Float8Format format, bool transposed = false) {
  const std::vector<float> v = x.to(kFloat32).to_vector<float>();  // exact for every 16-bit float
  float amax = 0;
  for (float e : v) amax = std::max(amax, std::fabs(e));
  const float scale = float8::scale_for_amax(amax, format);
  const int64_t rows = x.size(0), cols = x.size(1);
  std::vector<uint8_t> codes(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      codes[transposed ? c * rows + r : r * cols + c] = float8::encode(v[r * cols + c] * scale, format);
  return codes;
}

inline std::vector<uint8_t> codes_of(const Tensor& bits) { return bits.to(Device::cpu()).to_vector<uint8_t>(); }

// out = a @ b^T (+ bias) in float64 from the codes' exact values, and for
// each element the sum of the products' magnitudes, which bounds the error
// of any order of float32 additions.
struct ProductReference {
  std::vector<double> value, magnitude;
};

inline ProductReference float8_product_reference(const Float8Matrix& a, const Float8Matrix& b, const Tensor& bias) {
  const std::vector<uint8_t> ac = codes_of(a.bits), bc = codes_of(b.bits);
  const double scale = static_cast<double>(a.inv_scale.item<float>()) * b.inv_scale.item<float>();
  const int64_t m = a.bits.size(0), n = b.bits.size(0), k = a.bits.size(1);
  const std::vector<double> add = bias.defined() ? bias.to(kFloat64).to_vector<double>() : std::vector<double>(n, 0);
  ProductReference ref{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = static_cast<double>(float8::decode(ac[i * k + l], a.format)) *
                         float8::decode(bc[j * k + l], b.format);
        sum += p;
        magnitude += std::fabs(p);
      }
      ref.value[i * n + j] = scale * sum + add[j];
      ref.magnitude[i * n + j] = scale * magnitude;
    }
  return ref;
}

// The relative error of one rounding to `dtype` (half an ulp, doubled for
// float32, where the bias may be added after the product).
inline double rounding_of(DType dtype) {
  return dtype == kBFloat16 ? std::ldexp(1.0, -8) : dtype == kFloat16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -23);
}

// Every element of out within accumulation * magnitude + one rounding of the reference.
inline void expect_float8_product(const Tensor& out, const ProductReference& ref, double accumulation,
                                  const std::string& what) {
  const std::vector<double> got = out.to(Device::cpu()).to_vector<double>();
  ASSERT_EQ(got.size(), ref.value.size()) << what;
  const double rounding = rounding_of(out.dtype());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = accumulation * ref.magnitude[i] + rounding * std::fabs(ref.value[i]) + 1e-30;
    if (!(std::fabs(got[i] - ref.value[i]) <= bound) && bad++ < 5)
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the reference " << ref.value[i]
                    << " (bound " << bound << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": elements out of bounds";
}

}  // namespace loom::testing
