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
// the rest. With AVX2, 8 outputs at a time: the compiler does not vectorise
// this loop (the stride-2 loads and the 64-bit indices). A row's last group
// of fewer than 8 (the cnn's rows have 14 and 7 outputs) goes through small
// buffers on the stack, not masked loads and stores: AMD's Zen cores run a
// masked store as a long microcoded sequence, and with masks the cnn's two
// poolings took 2-7x as long (`ops_bench --benchmark_filter=max_pool`).
inline int64_t max_pool_row_2x2(const float* top, const float* bottom, int64_t w, int64_t first_at, int64_t wo,
                                float* out, int64_t* idx) {
  int64_t ow = 0;
#ifdef __AVX2__
  // Even and odd elements of the 16 floats at p, each in order.
  auto split = [](const float* p, __m256& even, __m256& odd) {
    const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
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
  // 8 outputs from 16 floats of each input row; `at` is the top row's first
  // element's index in the plane.
  auto group = [&](const float* top_row, const float* bottom_row, int64_t at, float* o, int64_t* i) {
    __m256 a, b, c, d;
    split(top_row, a, b);
    split(bottom_row, c, d);
    const __m256 right_top = replaces8(b, a), right_bottom = replaces8(d, c);
    const __m256 upper = _mm256_blendv_ps(a, b, right_top), lower = _mm256_blendv_ps(c, d, right_bottom);
    const __m256 take_lower = replaces8(lower, upper);
    _mm256_storeu_ps(o, _mm256_blendv_ps(upper, lower, take_lower));
    // Offsets within the window (0, 1, w, w + 1) in 32 bits, then widened.
    const __m256i upper_at = _mm256_and_si256(_mm256_castps_si256(right_top), one);
    const __m256i lower_at = _mm256_add_epi32(row, _mm256_and_si256(_mm256_castps_si256(right_bottom), one));
    const __m256i offset = _mm256_add_epi32(
        lane_offsets, _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(upper_at),
                                                           _mm256_castsi256_ps(lower_at), take_lower)));
    const __m256i base = _mm256_set1_epi64x(at);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(i),
                        _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(offset))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(i + 4),
                        _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(offset, 1))));
  };
  for (; ow + 8 <= wo; ow += 8) group(top + 2 * ow, bottom + 2 * ow, first_at + 2 * ow, out + ow, idx + ow);
  if (const int64_t n = wo - ow; n > 0) {
    // The last n < 8 outputs: their 2n inputs copied in (the other lanes
    // are zeros, computed and dropped), then n results copied out.
    alignas(32) float top_tail[16] = {}, bottom_tail[16] = {}, out_tail[8];
    alignas(32) int64_t idx_tail[8];
    std::copy(top + 2 * ow, top + 2 * ow + 2 * n, top_tail);
    std::copy(bottom + 2 * ow, bottom + 2 * ow + 2 * n, bottom_tail);
    group(top_tail, bottom_tail, first_at + 2 * ow, out_tail, idx_tail);
    std::copy(out_tail, out_tail + n, out + ow);
    std::copy(idx_tail, idx_tail + n, idx + ow);
    ow = wo;
  }
#endif
  return ow;
}

}  // namespace loom::cpu
