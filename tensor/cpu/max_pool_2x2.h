// Max pooling's most common case, 2x2 windows with stride 2 on float32, 8
// outputs at a time with AVX2 (tensor/cpu/pool.cc runs the rest).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace loom::cpu {

// One output row of the most common pooling, 2x2 windows with stride 2. The
// four candidates are compared as a tree, which gives what the row-major
// scan gives (the first maximum, or the first NaN): (a b) and (c d), then the
// winners. Returns the number of outputs written (from 0); the caller does
// the rest. With AVX2, 8 outputs at a time, the last ones with masked loads
// and stores (the cnn's rows have 14 and 7 outputs): the compiler does not
// vectorise this loop (the stride-2 loads and the 64-bit indices).
inline int64_t max_pool_row_2x2(const float* top, const float* bottom, int64_t w, int64_t first_at, int64_t wo,
                                float* out, int64_t* idx) {
  int64_t ow = 0;
#ifdef __AVX2__
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  // Lanes [0, n) set, for n in [0, 8] (n may be outside: clamped by the compare).
  auto first_lanes = [&](int64_t n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(n)), lanes); };
  // Even and odd elements of the `n` (at most 16) floats at p, each in order.
  auto split = [&](const float* p, int64_t n, __m256& even, __m256& odd) {
    const __m256 lo = _mm256_maskload_ps(p, first_lanes(n)), hi = _mm256_maskload_ps(p + 8, first_lanes(n - 8));
    constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1), kOrder = _MM_SHUFFLE(3, 1, 2, 0);
    even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, kEven)), kOrder));
    odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, kOdd)), kOrder));
  };
  // replaces(v, best) on 8 lanes: (v > best or v is NaN) and best is not NaN.
  auto replaces8 = [](__m256 v, __m256 best) {
    const __m256 larger_or_nan = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    return _mm256_and_ps(larger_or_nan, _mm256_cmp_ps(best, best, _CMP_ORD_Q));
  };
  const __m256i one = _mm256_set1_epi32(1), row = _mm256_set1_epi32(static_cast<int32_t>(w));
  const __m256i lane_offsets = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  for (; ow < wo; ow += 8) {
    const int64_t n = std::min<int64_t>(8, wo - ow);
    __m256 a, b, c, d;
    split(top + 2 * ow, 2 * n, a, b);
    split(bottom + 2 * ow, 2 * n, c, d);
    const __m256 right_top = replaces8(b, a), right_bottom = replaces8(d, c);
    const __m256 upper = _mm256_blendv_ps(a, b, right_top), lower = _mm256_blendv_ps(c, d, right_bottom);
    const __m256 take_lower = replaces8(lower, upper);
    const __m256i valid = first_lanes(n);
    _mm256_maskstore_ps(out + ow, valid, _mm256_blendv_ps(upper, lower, take_lower));
    // Offsets within the window (0, 1, w, w + 1) in 32 bits, then widened.
    const __m256i upper_at = _mm256_and_si256(_mm256_castps_si256(right_top), one);
    const __m256i lower_at = _mm256_add_epi32(row, _mm256_and_si256(_mm256_castps_si256(right_bottom), one));
    const __m256i at = _mm256_add_epi32(
        lane_offsets, _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(upper_at),
                                                           _mm256_castsi256_ps(lower_at), take_lower)));
    const __m256i base = _mm256_set1_epi64x(first_at + 2 * ow);
    auto* idx64 = reinterpret_cast<long long*>(idx + ow);
    _mm256_maskstore_epi64(idx64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(valid)),
                           _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at))));
    _mm256_maskstore_epi64(idx64 + 4, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(valid, 1)),
                           _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at, 1))));
  }
#endif
  return ow;
}

}  // namespace loom::cpu
