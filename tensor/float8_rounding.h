// float8 values as Hopper's tensor cores read them: a float rounded to a
// float8 byte, a byte decoded back, and the tensorwise scale. Pure functions
// that the CPU backend and the CUDA cast kernel share (as random_draw.h is
// shared), so both devices turn the same float into the same byte.
//
//   e4m3 (PyTorch's float8_e4m3fn): 1 sign, 4 exponent (bias 7), 3 mantissa
//        bits; largest 448, smallest subnormal 2^-9; no infinity; NaN is
//        S.1111.111 (0x7F, 0xFF).
//   e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits; largest 57344,
//        smallest subnormal 2^-16; infinities S.11111.00, NaN S.11111.xx.
//
// encode() rounds to nearest, ties to even, and saturates: a value beyond the
// largest finite one (an infinity too) becomes that value with its sign, as
// torchao's casts do (a clamp, then PyTorch's cast) and CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...). NaN becomes sign | 0x7F.
// decode() is exact (every float8 value is a float).
//
//   uint8_t code = float8::encode(300.0f, Float8Format::kE4M3);  // 0x79: 288, the nearest e4m3
//   float back = float8::decode(code, Float8Format::kE4M3);       // 288.0f
//
// Tensorwise scaling (torchao's default dynamic recipe): a tensor x is stored
// as the codes of x * scale, scale = largest / max(amax(|x|), 1e-12), so that
// its largest magnitude lands on the format's largest value; a code c stands
// for decode(c) / scale.
#pragma once

#include <cstdint>
#include <cstring>

#include "tensor/host_device.h"

namespace loom {

enum class Float8Format : uint8_t {
  kE4M3,  // activations and weights: more precision
  kE5M2,  // gradients: more range
};

namespace float8 {

LOOM_HOST_DEVICE int mantissa_bits(Float8Format format) { return format == Float8Format::kE4M3 ? 3 : 2; }
LOOM_HOST_DEVICE int exponent_bias(Float8Format format) { return format == Float8Format::kE4M3 ? 7 : 15; }
// The largest finite value and its code.
LOOM_HOST_DEVICE float largest(Float8Format format) { return format == Float8Format::kE4M3 ? 448.0f : 57344.0f; }
LOOM_HOST_DEVICE uint8_t largest_code(Float8Format format) { return format == Float8Format::kE4M3 ? 0x7E : 0x7B; }

LOOM_HOST_DEVICE uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

LOOM_HOST_DEVICE float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// 2^e as a float, for e a normal float exponent (-126 .. 127): exact.
LOOM_HOST_DEVICE float power_of_two(int e) { return float_of(static_cast<uint32_t>(e + 127) << 23); }

LOOM_HOST_DEVICE uint8_t encode(float x, Float8Format format) {
  const uint32_t u = bits_of(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7F;  // NaN
  if (float_of(magnitude) >= largest(format)) return sign | largest_code(format);  // saturate, infinities too
  const int mbits = mantissa_bits(format), bias = exponent_bias(format);
  const int exponent = static_cast<int>(magnitude >> 23) - 127;  // float subnormals read as -127: below any float8 normal
  if (exponent < 1 - bias) {
    // Below the smallest normal 2^(1 - bias): a count of subnormal steps
    // 2^(1 - bias - mbits), rounded. Scaling by a power of two is exact, and so
    // is the fraction left over (steps < 2^mbits). A count of 2^mbits is the
    // smallest normal's code, which is what it should round to.
    const float steps = float_of(magnitude) * power_of_two(bias - 1 + mbits);
    uint32_t count = static_cast<uint32_t>(steps);
    const float rest = steps - static_cast<float>(count);
    if (rest > 0.5f || (rest == 0.5f && (count & 1u))) ++count;
    return sign | static_cast<uint8_t>(count);
  }
  // A normal: keep the top mbits of the mantissa and round on the dropped
  // bits. A carry out of the mantissa steps the exponent up, which is the
  // right result; it cannot reach the NaN/infinity codes, since values that
  // would round past the largest one saturated above.
  const int dropped = 23 - mbits;
  uint32_t code = (static_cast<uint32_t>(exponent + bias) << mbits) | ((magnitude & 0x7FFFFFu) >> dropped);
  const uint32_t rest = magnitude & ((1u << dropped) - 1), half = 1u << (dropped - 1);
  if (rest > half || (rest == half && (code & 1u))) ++code;
  return sign | static_cast<uint8_t>(code);
}

LOOM_HOST_DEVICE float decode(uint8_t code, Float8Format format) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const int mbits = mantissa_bits(format), bias = exponent_bias(format);
  const uint32_t exponent = (code & 0x7Fu) >> mbits, mantissa = code & ((1u << mbits) - 1);
  const uint32_t top_exponent = (1u << (7 - mbits)) - 1;
  if (format == Float8Format::kE4M3 && exponent == top_exponent && mantissa == 7) return float_of(sign | 0x7FC00000u);
  if (format == Float8Format::kE5M2 && exponent == top_exponent)
    return float_of(sign | (mantissa == 0 ? 0x7F800000u : 0x7FC00000u));  // infinity, or NaN
  if (exponent == 0)  // subnormal (or zero): mantissa steps of 2^(1 - bias - mbits)
    return float_of(sign | bits_of(static_cast<float>(mantissa) * power_of_two(1 - bias - mbits)));
  return float_of(sign | ((exponent - bias + 127) << 23) | (mantissa << (23 - mbits)));
}

// torchao's amax_to_scale: largest / max(amax, 1e-12), divided in float64
// and rounded to float32 (an amax of NaN gives NaN, which then spreads to
// the product: a NaN is not hidden). An all-zero tensor gets 4.48e14 for
// e4m3, and its codes are all zero.
LOOM_HOST_DEVICE float scale_for_amax(float amax, Float8Format format) {
  const double floor = 1e-12;
  const double clamped = static_cast<double>(amax) < floor ? floor : static_cast<double>(amax);
  return static_cast<float>(static_cast<double>(largest(format)) / clamped);
}

}  // namespace float8
}  // namespace loom
