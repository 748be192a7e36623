// Vector math of loom's own, where Eigen's packet functions are not what
// loom wants: a square root correctly rounded in every lane, and an exp of
// 8 floats.
//
// packet_sqrt: Eigen's float psqrt under EIGEN_FAST_MATH (Eigen's default)
// is an estimate and one Newton step, a last bit apart from std::sqrt, so a
// contiguous tensor's square roots (vector lanes) and a strided one's
// (scalar) differed. This is the square root itself, as PyTorch's.
//
// exp8: Cephes' expf (e^x = 2^n e^r, r = x - n ln 2 in two steps, e^r by a
// degree-7 polynomial), within 2 ulp of the true value. Eigen's pexp
// computes the same but scales by 2^n in several steps so that it can reach
// the subnormal range: GELU's forward and backward as Eigen array
// expressions run at 0.55x loom's kernel on this one (docs/benchmarks.md).
// Here the argument is clamped to [-87, 88] first, so the result is always
// a normal number: e^-87 = 1.6e-38 stands for anything smaller (and a
// product reading it never meets the slow subnormal path), e^88 = 1.7e38
// for anything larger. NaN stays NaN.
#pragma once

#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#ifdef __AVX__
#include <immintrin.h>
#endif

namespace loom::cpu {

template <typename Packet>
Packet packet_sqrt(const Packet& x) {
  return Eigen::internal::psqrt(x);
}
#ifdef __AVX__
inline Eigen::internal::Packet8f packet_sqrt(const Eigen::internal::Packet8f& x) { return _mm256_sqrt_ps(x); }
#endif

#ifdef __AVX2__

// The mask of a vector's first `count` lanes (all 8 for count >= 8), for
// the masked loads and stores of a row's last partial vector.
inline __m256i first_lanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 8 ? count : 8)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline __m256 exp8(__m256 x) {
  // max and min return their second operand when either is NaN: x's NaN goes through.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln 2, ln 2 split in two so that n ln 2's high part is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n as a float's exponent bits: n is in [-126, 127], a normal number.
  const __m256i two_to_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_to_n));
}

#endif  // __AVX2__

// e^x of a packet: exp8 for 8 floats, else Eigen's.
template <typename Packet>
Packet packet_exp(const Packet& x) {
  return Eigen::internal::pexp(x);
}
#ifdef __AVX2__
inline Eigen::internal::Packet8f packet_exp(const Eigen::internal::Packet8f& x) { return exp8(x); }
#endif

// x[i] = e^(x[i] - shift) for i < n. float32: every element by exp8, the
// last partial vector through masked loads and stores (Eigen would leave a
// row's first and last few to the scalar exp, slower and rounded apart);
// float64: Eigen's.
template <typename T>
void exp_shifted(T* x, int64_t n, T shift) {
#ifdef __AVX2__
  if constexpr (std::is_same_v<T, float>) {
    const __m256 by = _mm256_set1_ps(shift);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), by)));
    if (i == n) return;
    const __m256i mask = first_lanes(n - i);
    _mm256_maskstore_ps(x + i, mask, exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), by)));
    return;
  }
#endif
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> values(x, n);
  values = (values - shift).exp();
}

}  // namespace loom::cpu
