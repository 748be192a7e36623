// The 16-bit floating-point formats, as values a kernel can hold:
//
//   bfloat16  1 sign, 8 exponent, 7 mantissa bits: float32's range, 3 digits
//   float16   1 sign, 5 exponent, 10 mantissa bits: IEEE binary16, to 65504
//
// Both convert from float32 with round-to-nearest-even (what hardware and
// PyTorch do); infinities stay infinite, NaN stays NaN (made quiet, never
// rounded into an infinity), values beyond float16's range become infinity,
// and float16's subnormals are rounded like any other value. Conversions to
// float32 are exact. Arithmetic is done in float32: a BFloat16 converts to
// float implicitly, and from any arithmetic value through float.
//
//   BFloat16 b = 3.14159f;       // bits 0x4049: 3.140625
//   float f = b;                 // 3.140625f
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace loom {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  // Round to nearest even on the 16 bits dropped: add 0x7fff, plus 1 when
  // the kept part is odd (a carry into the exponent is the right result).
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

inline float bfloat16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((magnitude >> 13) & 0x3ffu);  // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds to 65520 or more: infinity
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): a subnormal, in units of 2^-24.
    // Adding 0.5 pushes the value's bits into place; the hardware's addition
    // rounds to nearest even.
    const float scaled = bits_float(magnitude) + 0.5f;
    return sign | static_cast<uint16_t>(float_bits(scaled) - float_bits(0.5f));
  }
  // Normal: rebias the exponent (127 -> 15) and round off 13 mantissa bits.
  const uint32_t rebased = magnitude - ((127u - 15u) << 23);
  return sign | static_cast<uint16_t>((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa x 2^-24, exact in float.
  const float magnitude = static_cast<float>(mantissa) * bits_float(0x33800000u);  // 2^-24
  return sign ? -magnitude : magnitude;
}

// A 16-bit float held as its bits, converting from float with FromFloat and
// back with ToFloat.
template <uint16_t (*FromFloat)(float), float (*ToFloat)(uint16_t)>
struct Float16Bits {
  uint16_t bits = 0;

  Float16Bits() = default;
  template <typename U, typename = std::enable_if_t<std::is_arithmetic_v<U>>>
  Float16Bits(U value) : bits(FromFloat(static_cast<float>(value))) {}  // NOLINT: implicit, like float
  // From the other 16-bit format, through float (exact for bfloat16 -> float).
  template <uint16_t (*F)(float), float (*T)(uint16_t)>
  explicit Float16Bits(Float16Bits<F, T> other) : bits(FromFloat(static_cast<float>(other))) {}
  operator float() const { return ToFloat(bits); }  // NOLINT

  static Float16Bits from_bits(uint16_t b) {
    Float16Bits v;
    v.bits = b;
    return v;
  }
};

using BFloat16 = Float16Bits<float_to_bfloat16_bits, bfloat16_bits_to_float>;
using Float16 = Float16Bits<float_to_half_bits, half_bits_to_float>;

}  // namespace loom
