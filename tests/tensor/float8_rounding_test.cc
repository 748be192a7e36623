// float8 encoding and decoding (tensor/float8_rounding.h): hand-computed
// cases, every code's round trip, and every bfloat16 value and a million
// random floats against a brute-force reference (the nearest of the 256
// values, ties to the even code, saturated), which shares no code with the
// bit manipulation under test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "tensor/float8_rounding.h"

namespace loom {
namespace {

using float8::decode;
using float8::encode;
constexpr Float8Format kE4M3 = Float8Format::kE4M3, kE5M2 = Float8Format::kE5M2;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The brute-force reference: the finite code whose value is nearest to x
// (in float64), the even code on a tie; beyond the largest value, the
// largest; NaN to sign | 0x7F.
uint8_t reference_encode(float x, Float8Format format) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  const uint8_t largest = format == kE4M3 ? 0x7E : 0x7B;
  if (a >= decode(largest, format)) return sign | largest;
  int best = 0;
  double best_distance = INFINITY;
  for (int code = 0; code <= largest; ++code) {
    const double distance = std::fabs(a - static_cast<double>(decode(static_cast<uint8_t>(code), format)));
    if (distance < best_distance || (distance == best_distance && code % 2 == 0)) {
      best = code;
      best_distance = distance;
    }
  }
  return sign | static_cast<uint8_t>(best);
}

float from_bits(uint32_t u) { return float8::float_of(u); }

TEST(Float8Rounding, E4M3HandComputedCases) {
  EXPECT_EQ(encode(1.0f, kE4M3), 0x38);      // 0 0111 000
  EXPECT_EQ(encode(448.0f, kE4M3), 0x7E);    // 0 1111 110: the largest; 0x7F is NaN
  EXPECT_EQ(encode(464.0f, kE4M3), 0x7E);    // halfway to 480, which e4m3 lacks: saturated
  EXPECT_EQ(encode(1e6f, kE4M3), 0x7E);
  EXPECT_EQ(encode(-500.0f, kE4M3), 0xFE);
  EXPECT_EQ(encode(kInf, kE4M3), 0x7E);
  EXPECT_EQ(encode(-kInf, kE4M3), 0xFE);
  EXPECT_EQ(encode(300.0f, kE4M3), 0x79);    // 288 is nearer than 320
  // Ties to even: 1 + 1/16 lies halfway between 1 (mantissa 000) and 1.125 (001).
  EXPECT_EQ(encode(1.0625f, kE4M3), 0x38);
  EXPECT_EQ(encode(1.1875f, kE4M3), 0x3A);   // between 1.125 (001) and 1.25 (010): to 010
  EXPECT_EQ(encode(std::nextafter(1.0625f, 2.0f), kE4M3), 0x39);  // just past the tie
  EXPECT_EQ(encode(std::nextafter(1.0625f, 0.0f), kE4M3), 0x38);
  // Subnormals: steps of 2^-9 below the smallest normal 2^-6.
  EXPECT_EQ(encode(std::ldexp(1.0f, -9), kE4M3), 0x01);
  EXPECT_EQ(decode(0x01, kE4M3), std::ldexp(1.0f, -9));
  EXPECT_EQ(encode(std::ldexp(1.0f, -10), kE4M3), 0x00);  // half a step: to the even 0
  EXPECT_EQ(encode(std::ldexp(3.0f, -10), kE4M3), 0x02);  // 1.5 steps: to the even 2
  EXPECT_EQ(encode(std::nextafter(std::ldexp(1.0f, -10), 1.0f), kE4M3), 0x01);
  EXPECT_EQ(encode(std::ldexp(7.0f, -9), kE4M3), 0x07);   // the largest subnormal
  EXPECT_EQ(encode(std::ldexp(15.0f, -10), kE4M3), 0x08); // 7.5 steps: to 8, the smallest normal
  EXPECT_EQ(decode(0x08, kE4M3), std::ldexp(1.0f, -6));
  EXPECT_EQ(encode(1e-40f, kE4M3), 0x00);                 // a float subnormal
  // Signed zeros and NaN.
  EXPECT_EQ(encode(0.0f, kE4M3), 0x00);
  EXPECT_EQ(encode(-0.0f, kE4M3), 0x80);
  EXPECT_TRUE(std::signbit(decode(0x80, kE4M3)) && decode(0x80, kE4M3) == 0.0f);
  EXPECT_EQ(encode(kNaN, kE4M3), 0x7F);
  EXPECT_EQ(encode(-kNaN, kE4M3), 0xFF);
  EXPECT_TRUE(std::isnan(decode(0x7F, kE4M3)));
  EXPECT_TRUE(std::isnan(decode(0xFF, kE4M3)));
  EXPECT_EQ(decode(0x7E, kE4M3), 448.0f);
  EXPECT_EQ(decode(0xFE, kE4M3), -448.0f);
}

TEST(Float8Rounding, E5M2HandComputedCases) {
  EXPECT_EQ(encode(1.0f, kE5M2), 0x3C);      // 0 01111 00
  EXPECT_EQ(encode(57344.0f, kE5M2), 0x7B);  // 0 11110 11: the largest finite
  EXPECT_EQ(encode(61440.0f, kE5M2), 0x7B);  // halfway to 65536 (infinity's place): saturated
  EXPECT_EQ(encode(kInf, kE5M2), 0x7B);
  EXPECT_EQ(encode(-kInf, kE5M2), 0xFB);
  EXPECT_EQ(encode(1.125f, kE5M2), 0x3C);    // between 1 (00) and 1.25 (01): to 00
  EXPECT_EQ(encode(1.375f, kE5M2), 0x3E);    // between 1.25 (01) and 1.5 (10): to 10
  EXPECT_EQ(encode(std::ldexp(1.0f, -16), kE5M2), 0x01);  // the smallest subnormal
  EXPECT_EQ(decode(0x01, kE5M2), std::ldexp(1.0f, -16));
  EXPECT_EQ(encode(std::ldexp(1.0f, -17), kE5M2), 0x00);
  EXPECT_EQ(encode(std::ldexp(3.0f, -17), kE5M2), 0x02);
  EXPECT_EQ(decode(0x04, kE5M2), std::ldexp(1.0f, -14));  // the smallest normal
  EXPECT_EQ(encode(-0.0f, kE5M2), 0x80);
  EXPECT_EQ(encode(kNaN, kE5M2), 0x7F);
  EXPECT_EQ(decode(0x7C, kE5M2), kInf);
  EXPECT_EQ(decode(0xFC, kE5M2), -kInf);
  for (uint8_t nan : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(decode(nan, kE5M2))) << int(nan);
  EXPECT_EQ(decode(0x7B, kE5M2), 57344.0f);
}

// Every code decodes and encodes back to itself, except NaNs (to a NaN
// code) and e5m2's infinities (saturated to the largest finite value).
TEST(Float8Rounding, EveryCodeRoundTrips) {
  for (Float8Format format : {kE4M3, kE5M2}) {
    int finite = 0;
    for (int c = 0; c < 256; ++c) {
      const uint8_t code = static_cast<uint8_t>(c);
      const float value = decode(code, format);
      const uint8_t back = encode(value, format);
      if (std::isnan(value)) {
        EXPECT_TRUE(std::isnan(decode(back, format))) << c;
      } else if (std::isinf(value)) {
        EXPECT_EQ(back, (code & 0x80) | float8::largest_code(format)) << c;
      } else {
        EXPECT_EQ(back, code) << "format " << int(format) << " code " << c << " value " << value;
        ++finite;
      }
    }
    // e4m3: 256 less its two NaNs; e5m2: less six NaNs and two infinities.
    EXPECT_EQ(finite, format == kE4M3 ? 254 : 248);
  }
}

// All 2^16 bfloat16 values (floats whose low 16 bits are zero: every
// exponent, both signs, infinities and NaNs), then scaled by powers of two
// between them, against the brute-force reference.
TEST(Float8Rounding, EveryBFloat16MatchesTheNearestValue) {
  for (Float8Format format : {kE4M3, kE5M2})
    for (uint32_t high = 0; high < 65536; ++high) {
      const float x = from_bits(high << 16);
      ASSERT_EQ(encode(x, format), reference_encode(x, format)) << "format " << int(format) << " x " << x;
    }
}

TEST(Float8Rounding, RandomFloatsMatchTheNearestValue) {
  std::mt19937 rng(8);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_real_distribution<float> mantissa(-2.0f, 2.0f);
  std::uniform_int_distribution<int> exponent(-22, 18);  // both formats' subnormals to beyond their largest
  for (Float8Format format : {kE4M3, kE5M2})
    for (int i = 0; i < 500000; ++i) {
      const float x = i % 2 == 0 ? from_bits(any_bits(rng)) : std::ldexp(mantissa(rng), exponent(rng));
      ASSERT_EQ(encode(x, format), reference_encode(x, format)) << "format " << int(format) << " x " << x;
    }
}

TEST(Float8Rounding, ScaleFromTheAmaxAsTorchao) {
  EXPECT_EQ(float8::scale_for_amax(448.0f, kE4M3), 1.0f);
  EXPECT_EQ(float8::scale_for_amax(1.0f, kE4M3), 448.0f);
  EXPECT_EQ(float8::scale_for_amax(2.0f, kE5M2), 28672.0f);
  // Divided in float64, then rounded to float32: 448 / 3.
  EXPECT_EQ(float8::scale_for_amax(3.0f, kE4M3), static_cast<float>(448.0 / 3.0));
  // An all-zero tensor: the amax is clamped to 1e-12.
  EXPECT_EQ(float8::scale_for_amax(0.0f, kE4M3), static_cast<float>(448.0 / 1e-12));
  EXPECT_TRUE(std::isnan(float8::scale_for_amax(kNaN, kE4M3)));
  EXPECT_EQ(float8::scale_for_amax(kInf, kE4M3), 0.0f);
}

}  // namespace
}  // namespace loom
