// The LSTM cell's float32 rows in AVX2 registers (lstm_cell.cc; other
// dtypes and builds take its Eigen expressions). The expressions ran a
// loop per gate and per line of the backward, each over a segment of the
// row; here one pass reads each input once and writes each output once, 8
// hidden units at a time, the row's last partial vector under a mask.
// ops_bench, 64 rows of 128 hidden units forward and backward: 50 -> 30 us.
//
// The logistic is 1 / (1 + e^-x) with exp8 (vector_math.h: within 2 ulp,
// its argument clamped so that e^-x is a normal number); tanh is Eigen's
// vectorised one (a rational function), as the expressions used, and the
// forward's tanh(c) and the backward's are the same function.
#pragma once

#ifdef __AVX2__

#include <immintrin.h>

#include <cstdint>

#include <Eigen/Core>

#include "tensor/cpu/vector_math.h"

namespace loom::cpu::lstm_cell_rows {

inline __m256 logistic8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

inline __m256 tanh8(__m256 x) { return Eigen::internal::ptanh(x); }

// One batch row of n hidden units. Gates (i, f, g, o) are the four
// n-wide quarters of input_gates + hidden_gates; activations keeps them
// after their functions (logistic, logistic, tanh, logistic) for the
// backward. c = f c_prev + i g, h = o tanh(c).
[[gnu::flatten]] inline void forward(const VectorRow& row, const float* input_gates, const float* hidden_gates,
                                     const float* c_prev, float* h, float* c, float* activations) {
  const int64_t n = row.size();
  // Two passes: tanh(c) waits on g's tanh, and with both in one pass each
  // vector's chain was too long for the core to overlap the next one's.
  row.for_each([&](int64_t j, auto full) {
    auto gate = [&](int quarter) {
      const int64_t at = quarter * n + j;
      return _mm256_add_ps(row.load(input_gates, at, full), row.load(hidden_gates, at, full));
    };
    row.store(activations, j, logistic8(gate(0)), full);
    row.store(activations, n + j, logistic8(gate(1)), full);
    row.store(activations, 2 * n + j, tanh8(gate(2)), full);
    row.store(activations, 3 * n + j, logistic8(gate(3)), full);
  });
  row.for_each([&](int64_t j, auto full) {
    const __m256 i = row.load(activations, j, full), f = row.load(activations, n + j, full);
    const __m256 g = row.load(activations, 2 * n + j, full), o = row.load(activations, 3 * n + j, full);
    const __m256 cell = _mm256_fmadd_ps(i, g, _mm256_mul_ps(f, row.load(c_prev, j, full)));
    row.store(c, j, cell, full);
    row.store(h, j, _mm256_mul_ps(o, tanh8(cell)), full);
  });
}

// The backward of one row, as lstm_cell.cc writes it out: with t = tanh(c)
// and dc_total = dc + dh o (1 - t^2), d(o) = dh t o (1 - o), d(i) =
// dc_total g i (1 - i), d(f) = dc_total c_prev f (1 - f), d(g) = dc_total i
// (1 - g^2), dc_prev = dc_total f. dc_prev may be dc itself.
[[gnu::flatten]] inline void backward(const VectorRow& row, const float* dh, const float* dc, const float* activations,
                                      const float* c_prev, const float* c, float* dgates, float* dc_prev) {
  const int64_t n = row.size();
  const __m256 one = _mm256_set1_ps(1.0f);
  row.for_each([&](int64_t j, auto full) {
    const __m256 i = row.load(activations, j, full), f = row.load(activations, n + j, full);
    const __m256 g = row.load(activations, 2 * n + j, full), o = row.load(activations, 3 * n + j, full);
    const __m256 t = tanh8(row.load(c, j, full)), dh_j = row.load(dh, j, full);
    const __m256 dh_o = _mm256_mul_ps(dh_j, o);
    const __m256 dc_total = _mm256_fmadd_ps(dh_o, _mm256_fnmadd_ps(t, t, one), row.load(dc, j, full));
    row.store(dgates, j, _mm256_mul_ps(_mm256_mul_ps(dc_total, g), _mm256_mul_ps(i, _mm256_sub_ps(one, i))), full);
    const __m256 df = _mm256_mul_ps(dc_total, row.load(c_prev, j, full));
    row.store(dgates, n + j, _mm256_mul_ps(df, _mm256_mul_ps(f, _mm256_sub_ps(one, f))), full);
    row.store(dgates, 2 * n + j, _mm256_mul_ps(_mm256_mul_ps(dc_total, i), _mm256_fnmadd_ps(g, g, one)), full);
    row.store(dgates, 3 * n + j, _mm256_mul_ps(_mm256_mul_ps(dh_o, t), _mm256_sub_ps(one, o)), full);
    row.store(dc_prev, j, _mm256_mul_ps(dc_total, f), full);
  });
}

}  // namespace loom::cpu::lstm_cell_rows

#endif  // __AVX2__
