// Vector math of loom's own, where Eigen's packet functions are not what
// loom wants: a square root correctly rounded in every lane, and an exp of
// 8 floats; and the row of vectors (VectorRow) that loom's AVX2 float32
// row kernels run on.
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

// Whether T's rows take loom's AVX2 float32 kernels (layer_norm_rows.h,
// lstm_cell_rows.h) rather than Eigen expressions: float, on an AVX2 build.
template <typename T>
constexpr bool rows_in_registers() {
#ifdef __AVX2__
  return std::is_same_v<T, float>;
#else
  return false;
#endif
}

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

// A row of n floats as vectors of 8, vector i covering [i, i + 8): the full
// ones, then the last partial one under a mask, whose loads read zeros past
// the row's end and whose stores write nothing there. `full` (whether all 8
// lanes are in the row) is a std::bool_constant, so that each use compiles
// to straight code. Layer norm's rows and the LSTM cell's run on it.
class VectorRow {
 public:
  explicit VectorRow(int64_t n) : n_(n), tail_(first_lanes(n % 8)) {}
  int64_t size() const { return n_; }

  // body(i, full) for i = 0, 8, ... below n.
  template <typename Body>
  void for_each(Body body) const {
    int64_t i = 0;
    for (; i + 8 <= n_; i += 8) body(i, std::true_type{});
    if (i < n_) body(i, std::false_type{});
  }

  // The 8 values from p + i.
  template <bool Full>
  __m256 load(const float* p, int64_t i, std::bool_constant<Full>) const {
    return Full ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, tail_);
  }
  template <bool Full>
  void store(float* p, int64_t i, __m256 v, std::bool_constant<Full>) const {
    if (Full)
      _mm256_storeu_ps(p + i, v);
    else
      _mm256_maskstore_ps(p + i, tail_, v);
  }
  // v with the lanes past the row's end set to zero.
  template <bool Full>
  __m256 inside(__m256 v, std::bool_constant<Full>) const {
    return Full ? v : _mm256_and_ps(v, _mm256_castsi256_ps(tail_));
  }

 private:
  int64_t n_;
  __m256i tail_;
};

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
