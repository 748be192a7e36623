// Layer norm's float32 rows in AVX2 registers (norm.cc; other dtypes and
// builds take its Eigen expressions). The expressions made a pass and a
// reduction call for each sum; here the forward makes three passes (the
// sum, the distances' sum and squares together, the output) and the
// backward two (its two sums with the weight and bias gradients' column
// sums, then dx). ops_bench, 512 rows of 128 forward and backward: 90 -> 51
// us. Both are [[gnu::flatten]]: without it GCC left the passes' lambdas as
// calls, and the rows ran slower than the expressions.
//
// The numbers are the ones norm.cc describes: a first mean, corrected by
// the sum of the distances from it, and a variance from those distances.
// Every sum starts its vector lanes at the row's first element and adds
// them in a fixed order, so a row gives the same bits at any address; the
// last partial vector goes through masked loads and stores, and its masked
// lanes add nothing.
#pragma once

#ifdef __AVX2__

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/cpu/vector_math.h"

namespace loom::cpu::layer_norm_rows {

// body(i, parity, full) for each vector i = 0, 8, ... of the row: parity
// (i / 8 % 2, which of a PairedSum's accumulators it adds to) and full
// (whether all 8 lanes are in the row) are std::integral_constants, so each
// call compiles to straight code. The full vectors go in pairs.
template <typename Body>
void for_each_paired(const VectorRow& row, Body body) {
  using Even = std::integral_constant<int, 0>;
  using Odd = std::integral_constant<int, 1>;
  const int64_t n = row.size(), full = n / 8 * 8;
  int64_t i = 0;
  for (; i + 16 <= full; i += 16) {
    body(i, Even{}, std::true_type{});
    body(i + 8, Odd{}, std::true_type{});
  }
  if (i < full) body(i, Even{}, std::true_type{}), i += 8;
  if (i == n) return;
  if (i / 8 % 2 == 0)
    body(i, Even{}, std::false_type{});
  else
    body(i, Odd{}, std::false_type{});
}

// The 8 lanes' sum, always in the same order.
inline float lane_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A sum over a row in two accumulators (even and odd vectors, so that
// adds overlap), added at the end.
struct PairedSum {
  __m256 part[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  template <int Parity>
  void add(std::integral_constant<int, Parity>, __m256 v) {
    part[Parity] = _mm256_add_ps(part[Parity], v);
  }
  template <int Parity>
  void add_product(std::integral_constant<int, Parity>, __m256 a, __m256 b) {
    part[Parity] = _mm256_fmadd_ps(a, b, part[Parity]);
  }
  float total() const { return lane_sum(_mm256_add_ps(part[0], part[1])); }
};

// y = (x - mean) rstd w + b over one row (w, b may be null); the row's
// mean and rstd written to *mean, *rstd.
[[gnu::flatten]] inline void forward(const VectorRow& lanes, const float* x, const float* w, const float* b, float eps, float* y,
                    float* mean, float* rstd) {
  const float count = static_cast<float>(lanes.size());
  PairedSum values;
  for_each_paired(lanes, [&](int64_t i, auto parity, auto full) { values.add(parity, lanes.load(x, i, full)); });
  const float first_mean = values.total() / count;
  const __m256 first = _mm256_set1_ps(first_mean);
  PairedSum distances, squares;
  for_each_paired(lanes, [&](int64_t i, auto parity, auto full) {
    const __m256 d = lanes.inside(_mm256_sub_ps(lanes.load(x, i, full), first), full);
    distances.add(parity, d);
    squares.add_product(parity, d, d);
  });
  const float shift = distances.total() / count;
  const float mu = first_mean + shift;
  const float var = std::max(0.0f, squares.total() / count - shift * shift);
  const float inv = 1.0f / std::sqrt(var + eps);
  *mean = mu;
  *rstd = inv;
  const __m256 mu8 = _mm256_set1_ps(mu), inv8 = _mm256_set1_ps(inv);
  for_each_paired(lanes, [&](int64_t i, auto, auto full) {
    const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(lanes.load(x, i, full), mu8), inv8);
    const __m256 scaled = w ? _mm256_mul_ps(xhat, lanes.load(w, i, full)) : xhat;
    lanes.store(y, i, b ? _mm256_add_ps(scaled, lanes.load(b, i, full)) : scaled, full);
  });
}

// One row's backward, with xhat = (x - mean) rstd and g = dy w (dy where w
// is null): dw_sums += dy xhat and db_sums += dy (each where not null), and
// dx = rstd (g - mean(g) - xhat mean(g xhat)) where dx is not null.
[[gnu::flatten]] inline void backward(const VectorRow& lanes, const float* dy, const float* x, const float* w, float mean, float rstd,
                     float* dx, float* dw_sums, float* db_sums) {
  const __m256 mean8 = _mm256_set1_ps(mean), rstd8 = _mm256_set1_ps(rstd);
  auto xhat_at = [&](int64_t i, auto full) {
    return _mm256_mul_ps(_mm256_sub_ps(lanes.load(x, i, full), mean8), rstd8);
  };
  auto g_at = [&](int64_t i, __m256 dyv, auto full) { return w ? _mm256_mul_ps(dyv, lanes.load(w, i, full)) : dyv; };
  PairedSum g_sum, gx_sum;
  for_each_paired(lanes, [&](int64_t i, auto parity, auto full) {
    const __m256 dyv = lanes.load(dy, i, full), xhat = xhat_at(i, full);
    if (dw_sums) lanes.store(dw_sums, i, _mm256_fmadd_ps(dyv, xhat, lanes.load(dw_sums, i, full)), full);
    if (db_sums) lanes.store(db_sums, i, _mm256_add_ps(lanes.load(db_sums, i, full), dyv), full);
    if (!dx) return;
    const __m256 g = g_at(i, dyv, full);  // zero past the row's end, as dy is there
    g_sum.add(parity, g);
    gx_sum.add_product(parity, g, xhat);
  });
  if (!dx) return;
  const float count = static_cast<float>(lanes.size());
  const __m256 g_mean = _mm256_set1_ps(g_sum.total() / count), gx_mean = _mm256_set1_ps(gx_sum.total() / count);
  for_each_paired(lanes, [&](int64_t i, auto, auto full) {
    const __m256 g = g_at(i, lanes.load(dy, i, full), full);
    const __m256 centred = _mm256_fnmadd_ps(xhat_at(i, full), gx_mean, _mm256_sub_ps(g, g_mean));
    lanes.store(dx, i, _mm256_mul_ps(rstd8, centred), full);
  });
}

}  // namespace loom::cpu::layer_norm_rows

#endif  // __AVX2__
