// Convolutions whose receptive field holds a handful of numbers: the first
// layer of an image net (1 or 2 channels through a 3x3 kernel, K = 9 or 18).
// tensor/cpu/conv.cc runs them on float32 instead of a GEMM.
//
// As a product of W (O, K) by the columns (K, pixels) such a layer is all
// output and no depth: each output adds only K products, so Eigen's GEMM
// spends its time zeroing the output, packing both operands and writing
// the output back, and the weight gradient packs dy for K columns of work.
// These kernels read the columns where im2col put them and write each
// output once, bias and ReLU included, and the weight gradient reads dy
// once, masking it with the ReLU on the way.
//
// Summation orders:
// - forward: out = bias + w_0 col_0 + w_1 col_1 + ..., one fused
//   multiply-add after another, in vector lanes and row tails alike, so a
//   pixel's value does not depend on where it falls in a row;
// - weight and bias gradients, over one sample's row of pixels: with AVX2,
//   lanes q mod 16 each summed in order, the 16 lanes added in order, then
//   the pixels past the last full group of 16 in order (without AVX2, all
//   pixels in order). Rows are added to the gradient sample after sample.
#pragma once

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include <cmath>
#include <cstdint>

#include "tensor/cpu/relu.h"

namespace loom::cpu {

// The deepest receptive field (C_in / groups x kH x kW) that takes these
// kernels; deeper ones are products worth a GEMM. ops_bench's conv entries
// measure both sides: at 9 (the cnn's first layer) these kernels ran the
// forward 1.7x and the weight gradient 1.15x as fast as the GEMM; at 27
// (RGB through 3x3) the GEMM was as fast forward and 15% faster for the
// weight gradient.
inline constexpr int64_t kShallowConvDepth = 18;

namespace shallow_detail {

// Outputs [q, pixels) of `Channels` channels, one pixel at a time.
template <int Channels>
void forward_tail(const float* w, const float* col, int64_t ld, int64_t depth, int64_t q, int64_t pixels,
                  const float* bias, bool relu_after, float* out) {
  for (; q < pixels; ++q)
    for (int c = 0; c < Channels; ++c) {
      float a = bias ? bias[c] : 0.f;
      for (int64_t k = 0; k < depth; ++k) a = std::fma(w[c * depth + k], col[k * ld + q], a);
      out[c * pixels + q] = relu_after ? relu_value(a) : a;
    }
}

// All pixels of `Channels` output channels (rows of out, `pixels` apart).
template <int Channels>
void forward_channels(const float* w, const float* col, int64_t ld, int64_t depth, int64_t pixels,
                      const float* bias, bool relu_after, float* out) {
  int64_t q = 0;
#ifdef __AVX2__
  const __m256 zero = _mm256_setzero_ps();
  for (; q + 16 <= pixels; q += 16) {
    __m256 acc[Channels][2];
#pragma GCC unroll 4
    for (int c = 0; c < Channels; ++c) acc[c][0] = acc[c][1] = _mm256_set1_ps(bias ? bias[c] : 0.f);
    for (int64_t k = 0; k < depth; ++k) {
      const __m256 x0 = _mm256_loadu_ps(col + k * ld + q), x1 = _mm256_loadu_ps(col + k * ld + q + 8);
#pragma GCC unroll 4
      for (int c = 0; c < Channels; ++c) {
        const __m256 wk = _mm256_broadcast_ss(w + c * depth + k);
        acc[c][0] = _mm256_fmadd_ps(wk, x0, acc[c][0]);
        acc[c][1] = _mm256_fmadd_ps(wk, x1, acc[c][1]);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < Channels; ++c)
      for (int half = 0; half < 2; ++half) {
        __m256 v = acc[c][half];
        if (relu_after) {  // keep v where v > 0 or v is NaN; +0 elsewhere (also for -0)
          const __m256 keep = _mm256_or_ps(_mm256_cmp_ps(v, zero, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
          v = _mm256_and_ps(v, keep);
        }
        _mm256_storeu_ps(out + c * pixels + q + 8 * half, v);
      }
  }
#endif
  forward_tail<Channels>(w, col, ld, depth, q, pixels, bias, relu_after, out);
}

#ifdef __AVX2__
// The 16 lanes of (low, high), added from lane 0 up.
inline float lanes_in_order(__m256 low, __m256 high) {
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, low);
  _mm256_store_ps(lanes + 8, high);
  float total = 0.f;
  for (float lane : lanes) total += lane;
  return total;
}
#endif

// sums[g] += sum over q of d[q] col[g ld + q] for g < Rows, in the order the
// file's comment gives.
template <int Rows>
void dot_rows(const float* d, const float* col, int64_t ld, int64_t pixels, float* sums) {
  float total[Rows] = {};
  int64_t q = 0;
#ifdef __AVX2__
  __m256 acc[Rows][2];
#pragma GCC unroll 4
  for (int g = 0; g < Rows; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
  for (; q + 16 <= pixels; q += 16) {
    const __m256 d0 = _mm256_loadu_ps(d + q), d1 = _mm256_loadu_ps(d + q + 8);
#pragma GCC unroll 4
    for (int g = 0; g < Rows; ++g) {
      acc[g][0] = _mm256_fmadd_ps(d0, _mm256_loadu_ps(col + g * ld + q), acc[g][0]);
      acc[g][1] = _mm256_fmadd_ps(d1, _mm256_loadu_ps(col + g * ld + q + 8), acc[g][1]);
    }
  }
  for (int g = 0; g < Rows; ++g) total[g] = lanes_in_order(acc[g][0], acc[g][1]);
#endif
  for (; q < pixels; ++q)
    for (int g = 0; g < Rows; ++g) total[g] = std::fma(d[q], col[g * ld + q], total[g]);
  for (int g = 0; g < Rows; ++g) sums[g] += total[g];
}

// The sum of d[0, pixels), in the same order as dot_rows.
inline float sum_row(const float* d, int64_t pixels) {
  float total = 0.f;
  int64_t q = 0;
#ifdef __AVX2__
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; q + 16 <= pixels; q += 16) {
    acc0 = _mm256_add_ps(acc0, _mm256_loadu_ps(d + q));
    acc1 = _mm256_add_ps(acc1, _mm256_loadu_ps(d + q + 8));
  }
  total = lanes_in_order(acc0, acc1);
#endif
  for (; q < pixels; ++q) total += d[q];
  return total;
}

}  // namespace shallow_detail

// out (og rows of `pixels`) = bias + w (og, depth) @ col (depth rows `ld`
// apart), through a ReLU if `relu`; bias may be null.
inline void shallow_conv_forward(const float* w, const float* col, int64_t ld, int64_t depth, int64_t og,
                                 int64_t pixels, const float* bias, bool relu, float* out) {
  int64_t o = 0;
  for (; o + 4 <= og; o += 4)
    shallow_detail::forward_channels<4>(w + o * depth, col, ld, depth, pixels, bias ? bias + o : nullptr, relu,
                                        out + o * pixels);
  for (; o < og; ++o)
    shallow_detail::forward_channels<1>(w + o * depth, col, ld, depth, pixels, bias ? bias + o : nullptr, relu,
                                        out + o * pixels);
}

// dw (og, depth) += dy' @ col^T and dbias (og) += dy' summed over the pixels
// (dbias may be null), where dy' is dy (og rows of `pixels`) with zeros
// where the fused ReLU's output `relu_out` is <= 0 (as gathered for the
// GEMM), or dy itself when relu_out is null. `row` holds `pixels` floats.
inline void shallow_conv_weight_grad(const float* dy, const float* relu_out, const float* col, int64_t ld,
                                     int64_t depth, int64_t og, int64_t pixels, float* dw, float* dbias, float* row) {
  for (int64_t o = 0; o < og; ++o) {
    const float* d = dy + o * pixels;
    if (relu_out) {
      relu_gradient_row(d, relu_out + o * pixels, pixels, row);
      d = row;
    }
    float* dw_o = dw + o * depth;
    int64_t k = 0;
    for (; k + 4 <= depth; k += 4) shallow_detail::dot_rows<4>(d, col + k * ld, ld, pixels, dw_o + k);
    for (; k < depth; ++k) shallow_detail::dot_rows<1>(d, col + k * ld, ld, pixels, dw_o + k);
    if (dbias) dbias[o] += shallow_detail::sum_row(d, pixels);
  }
}

}  // namespace loom::cpu
