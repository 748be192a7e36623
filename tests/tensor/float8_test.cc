// float8 casts and the scaled product on the CPU (tensor/float8.h): the
// codes against element-by-element encoding, the product against a float64
// reference of the same codes (the tolerance covers only float32's
// accumulation order), exact products by permutation matrices, and every
// refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tensor/float8.h"
#include "tests/tensor/float8_reference.h"
#include "tests/test_util.h"

namespace loom {
namespace {

using testing::codes_of;
using testing::expected_codes;
constexpr Float8Format kE4M3 = Float8Format::kE4M3, kE5M2 = Float8Format::kE5M2;

Tensor random_matrix(int64_t rows, int64_t cols, DType dtype, uint64_t seed, double spread = 3) {
  Generator g(seed);
  return (randn({rows, cols}, {.dtype = kFloat32}, &g) * spread).to(dtype);
}

// max |x|, on the host.
float amax_of(const Tensor& x) {
  float amax = 0;
  for (float v : x.to(kFloat32).to_vector<float>()) amax = std::max(amax, std::fabs(v));
  return amax;
}

// float32 sums of K exact products: each addition rounds once (2^-24 relative).
double accumulation_bound(int64_t k) { return 2.0 * k * std::ldexp(1.0, -24); }

TEST(Float8Cast, CodesScaleAndTransposedCopy) {
  for (DType dtype : {kFloat32, kBFloat16, kFloat16, kFloat64})
    for (Float8Format format : {kE4M3, kE5M2}) {
      const Tensor x = random_matrix(48, 80, dtype, 3);
      const Float8Cast cast = float8_cast(x, format, /*transposed=*/true);
      const std::string what = std::string(dtype_name(dtype)) + (format == kE4M3 ? " e4m3" : " e5m2");
      EXPECT_EQ(cast.matrix.bits.shape(), Shape({48, 80})) << what;
      EXPECT_EQ(cast.transposed.bits.shape(), Shape({80, 48})) << what;
      EXPECT_EQ(codes_of(cast.matrix.bits), expected_codes(x, format)) << what;
      EXPECT_EQ(codes_of(cast.transposed.bits), expected_codes(x, format, true)) << what;
      const float amax = amax_of(x);
      EXPECT_EQ(cast.matrix.inv_scale.item<float>(), 1.0f / float8::scale_for_amax(amax, format)) << what;
      EXPECT_TRUE(cast.transposed.inv_scale.is_same(cast.matrix.inv_scale)) << what;
    }
}

TEST(Float8Cast, TheLargestMagnitudeTakesTheLargestCode) {
  Tensor x = from_vector<float>({0.5f, -3.0f, 1.0f, 2.0f}, {2, 2});
  const Float8Cast cast = float8_cast(x, kE4M3, false);
  EXPECT_EQ(codes_of(cast.matrix.bits)[1], 0xFE);  // -3 -> -448
  EXPECT_FALSE(cast.transposed.bits.defined());
  // Scaled by 448 / 3: 0.5 -> 74.67 -> 72 (steps of 8 between 64 and 128),
  // 1 -> 149.3 -> 144 (steps of 16), 2 -> 298.7 -> 288 (steps of 32).
  EXPECT_EQ(float8::decode(codes_of(cast.matrix.bits)[0], kE4M3), 72.0f);
  const Tensor back = float8_dequantize(cast.matrix);
  EXPECT_EQ(back.dtype(), kFloat32);
  testing::expect_values(back, {72.0 * 3 / 448, -3.0, 144.0 * 3 / 448, 288.0 * 3 / 448}, 1e-6);
}

TEST(Float8Cast, AZeroMatrixCastsToZeros) {
  const Float8Cast cast = float8_cast(zeros({16, 16}), kE5M2, true);
  for (uint8_t code : codes_of(cast.matrix.bits)) EXPECT_EQ(code, 0);
  EXPECT_EQ(cast.matrix.inv_scale.item<float>(), 1.0f / static_cast<float>(57344.0 / 1e-12));
}

TEST(Float8Cast, ANonContiguousInputIsReadAsItsValues) {
  const Tensor x = random_matrix(32, 48, kFloat32, 4);
  const Tensor xt = x.t().contiguous().t();  // the same values, column by column in memory
  EXPECT_EQ(codes_of(float8_cast(xt, kE4M3, false).matrix.bits), expected_codes(x, kE4M3));
}

TEST(Float8Cast, RefusesWhatItCannotCast) {
  EXPECT_THROW_MSG(float8_cast(Tensor(), kE4M3, false), "undefined");
  EXPECT_THROW_MSG(float8_cast(zeros({4, 4, 4}), kE4M3, false), "expected a matrix");
  EXPECT_THROW_MSG(float8_cast(zeros({4, 4}, {.dtype = kInt64}), kE4M3, false), "float8_cast");
  EXPECT_THROW_MSG(float8_cast(zeros({0, 4}), kE4M3, false), "is empty");
}

// A (N, K) permutation matrix in e4m3 with scale 1: b's row j picks a's column perm[j].
Float8Matrix permutation(const std::vector<int64_t>& perm) {
  const int64_t n = perm.size();
  std::vector<uint8_t> codes(n * n, 0);
  for (int64_t j = 0; j < n; ++j) codes[j * n + perm[j]] = float8::encode(1.0f, kE4M3);
  return {from_vector<uint8_t>(codes, {n, n}), scalar_tensor(1.0), kE4M3};
}

// Products with one term per element are exact in every output dtype, so
// they check the layout (which operand is transposed, which scale applies
// to which) with no tolerance.
TEST(Float8ScaledMm, APermutationPermutesExactly) {
  const int64_t m = 32, k = 48;
  std::vector<int64_t> perm(k);
  std::iota(perm.begin(), perm.end(), 0);
  std::reverse(perm.begin(), perm.begin() + 20);
  std::rotate(perm.begin() + 20, perm.begin() + 27, perm.end());
  const Float8Matrix p = permutation(perm);
  for (Float8Format format : {kE4M3, kE5M2}) {
    const Float8Cast a = float8_cast(random_matrix(m, k, kFloat32, 5), format, false);
    const Tensor values = float8_dequantize(a.matrix);
    for (DType out : {kFloat32, kBFloat16, kFloat16}) {
      const Tensor y = float8_scaled_mm(a.matrix, p, Tensor(), out);
      EXPECT_EQ(y.dtype(), out);
      const Tensor expected = index_select(values, 1, from_vector<int64_t>(perm));
      EXPECT_EQ(y.to(kFloat32).to_vector<float>(), expected.to(out).to(kFloat32).to_vector<float>())
          << dtype_name(out);
      // And the other way round: p (K, K) @ a^T picks a's rows' elements, transposed.
      const Tensor yt = float8_scaled_mm(p, a.matrix, Tensor(), out);
      EXPECT_EQ(yt.to(kFloat32).to_vector<float>(), expected.t().contiguous().to(out).to(kFloat32).to_vector<float>())
          << dtype_name(out) << " transposed";
    }
  }
}

// The three products of a Linear layer's training step, as float8_linear runs them.
TEST(Float8ScaledMm, TheThreeProductsAgainstFloat64) {
  const int64_t m = 64, k = 96, n = 48;
  const Tensor x = random_matrix(m, k, kBFloat16, 6), w = random_matrix(n, k, kFloat32, 7, 0.1);
  const Tensor dy = random_matrix(m, n, kBFloat16, 8, 1e-3), bias = random_matrix(1, n, kFloat32, 9).reshape({n});
  const Float8Cast x8 = float8_cast(x, kE4M3, true), w8 = float8_cast(w, kE4M3, true), dy8 = float8_cast(dy, kE5M2, true);
  for (DType out : {kBFloat16, kFloat32}) {
    const Tensor b = bias.to(out);
    const Tensor y = float8_scaled_mm(x8.matrix, w8.matrix, b, out);  // x w^T + b
    testing::expect_float8_product(y, testing::float8_product_reference(x8.matrix, w8.matrix, b),
                                   accumulation_bound(k), "forward");
  }
  const Tensor dx = float8_scaled_mm(dy8.matrix, w8.transposed, Tensor(), kBFloat16);  // dy w: (M, K)
  EXPECT_EQ(dx.shape(), Shape({m, k}));
  testing::expect_float8_product(dx, testing::float8_product_reference(dy8.matrix, w8.transposed, Tensor()),
                                 accumulation_bound(n), "grad_input");
  const Tensor dw = float8_scaled_mm(dy8.transposed, x8.transposed, Tensor(), kFloat32);  // dy^T x: (N, K)
  EXPECT_EQ(dw.shape(), Shape({n, k}));
  testing::expect_float8_product(dw, testing::float8_product_reference(dy8.transposed, x8.transposed, Tensor()),
                                 accumulation_bound(m), "grad_weight");
}

TEST(Float8ScaledMm, RefusesWhatCuBlasLtCannotMultiply) {
  const Float8Matrix a = float8_cast(random_matrix(32, 48, kFloat32, 1), kE4M3, true).matrix;
  const Float8Matrix b = float8_cast(random_matrix(16, 48, kFloat32, 2), kE4M3, true).matrix;
  const Float8Matrix g = float8_cast(random_matrix(32, 48, kFloat32, 3), kE5M2, true).matrix;
  const Float8Matrix h = float8_cast(random_matrix(16, 48, kFloat32, 3), kE5M2, true).matrix;
  EXPECT_EQ(float8_scaled_mm(a, b, Tensor(), kBFloat16).shape(), Shape({32, 16}));
  EXPECT_THROW_MSG(float8_scaled_mm(g, h, Tensor(), kBFloat16), "both operands are e5m2");
  const Float8Matrix odd = float8_cast(random_matrix(24, 48, kFloat32, 4), kE4M3, false).matrix;
  EXPECT_THROW_MSG(float8_scaled_mm(odd, b, Tensor(), kBFloat16), "multiples of 16");
  const Float8Matrix short_rows = float8_cast(random_matrix(16, 32, kFloat32, 5), kE4M3, false).matrix;
  EXPECT_THROW_MSG(float8_scaled_mm(a, short_rows, Tensor(), kBFloat16), "must both be K long");
  EXPECT_THROW_MSG(float8_scaled_mm(a, b, Tensor(), kFloat64), "float32, bfloat16 or float16");
  EXPECT_THROW_MSG(float8_scaled_mm(a, b, zeros({16}), kBFloat16), "of the output's dtype");
  EXPECT_THROW_MSG(float8_scaled_mm(a, b, zeros({32}, {.dtype = kBFloat16}), kBFloat16), "the bias must be (N)");
  Float8Matrix rows = a;
  rows.bits = a.bits.narrow(0, 1, 16);  // a contiguous view 48 bytes in: aligned
  EXPECT_EQ(float8_scaled_mm(rows, b, Tensor(), kBFloat16).shape(), Shape({16, 16}));
  Float8Matrix shifted = a;
  shifted.bits = a.bits.reshape({-1}).narrow(0, 1, 16 * 48).reshape({16, 48});  // one byte in
  EXPECT_THROW_MSG(float8_scaled_mm(shifted, b, Tensor(), kBFloat16), "16-byte aligned");
  Float8Matrix floats = a;
  floats.bits = zeros({32, 48});
  EXPECT_THROW_MSG(float8_scaled_mm(floats, b, Tensor(), kBFloat16), "uint8 codes");
  Float8Matrix no_scale = a;
  no_scale.inv_scale = Tensor();
  EXPECT_THROW_MSG(float8_scaled_mm(no_scale, b, Tensor(), kBFloat16), "no codes or no scale");
}

}  // namespace
}  // namespace loom
