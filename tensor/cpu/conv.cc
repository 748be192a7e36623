// CPU 2-D convolution as im2col + GEMM over blocks of samples.
//
// im2col lays the receptive field of every output pixel out as a column:
// col (C_g kH kW, pixels). The convolution is then a matrix product with the
// weight viewed as (C_out_g, C_g kH kW); the backward passes are the two other
// products of the same three matrices, and col2im (the adjoint of im2col)
// scatters the input gradient back.
//
// One sample's product is small (the cnn benchmark's second layer: 64 x 288
// times 288 x 196), and Eigen's GEMM runs such shapes far below its peak. So
// each thread lays out the columns of a block of samples side by side,
// col (K, B pixels), and makes one product per block: B is chosen so the
// product is wide enough for the GEMM and the block's columns stay in cache.
// The bias is added while the block's product is copied into the NCHW output,
// and its gradient summed from the same gathered block of dy as the weight's.
// A fused ReLU (Conv2dParams::relu) rides on the same passes: applied in the
// output copy, and its mask applied to dy while dy is gathered, so the
// activation is never read or written on its own.
//
// A shallow float32 layer (a receptive field of at most kShallowConvDepth
// numbers: an image net's first layer) skips the GEMM in the forward pass
// and the weight gradient: tensor/cpu/shallow_conv.h multiplies its few
// rows of columns directly.
#include <Eigen/Core>

#include <algorithm>
#include <type_traits>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/relu.h"
#include "tensor/cpu/shallow_conv.h"
#include "tensor/creation.h"

namespace loom::cpu {
namespace {

template <typename T>
using ConstMatrixMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Output images at least this wide are multiplied a sample at a time in the
// forward pass (see conv2d).
constexpr int64_t kWideImage = 512;

struct ConvShape {
  int64_t n, c, h, w;      // input
  int64_t o, kh, kw;       // weight: o output channels
  int64_t ho, wo;          // output
  int64_t groups, cg, og;  // channels per group, in and out
  int64_t k() const { return cg * kh * kw; }  // rows of col
  int64_t pixels() const { return ho * wo; }
  int64_t plane() const { return h * w; }
};

// Whether conv2d and conv2d_backward_weight run shallow_conv.h's kernels.
template <typename T>
bool is_shallow(const ConvShape& s) {
  return std::is_same_v<T, float> && s.k() <= kShallowConvDepth;
}

ConvShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dParams& p) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3),
          out.size(2), out.size(3), p.groups, x.size(1) / p.groups, w.size(0) / p.groups};
}

// Samples per block: about 2048 GEMM columns, with the block's col under 4 MB.
// (Measured on the cnn benchmark: blocks of 3 of its 784-pixel first layer
// beat single samples, though a single sample's product needs no copy.)
int64_t block_samples(const ConvShape& s, size_t element_size) {
  const int64_t by_width = (2048 + s.pixels() - 1) / s.pixels();
  const int64_t by_bytes = (int64_t{4} << 20) / std::max<int64_t>(1, s.k() * s.pixels() * element_size);
  return std::max<int64_t>(1, std::min({by_width, by_bytes, s.n}));
}

// The output columns [begin, end) whose input column ow * stride - pad + offset
// lies inside [0, size).
struct Span {
  int64_t begin, end;
};

Span valid_outputs(int64_t offset, int64_t stride, int64_t pad, int64_t size, int64_t outputs) {
  const int64_t first = pad - offset;  // ow * stride >= first
  const int64_t last = size - 1 + pad - offset;  // ow * stride <= last
  const int64_t begin = first <= 0 ? 0 : (first + stride - 1) / stride;
  const int64_t end = last < 0 ? 0 : last / stride + 1;
  return {std::min(begin, outputs), std::max(std::min(end, outputs), std::min(begin, outputs))};
}

// col[(c kh + i) kw + j][oh wo + ow] = x[c][oh sh - ph + i dh][ow sw - pw + j dw], or 0 in the padding.
// Rows of col are `ld` apart (several samples' columns share a row). The
// padding's zeros are not written: they sit at the same places for every
// sample, so the caller zeroes col once (see PaddedColumns).
template <typename T>
void im2col(const T* x, const ConvShape& s, const Conv2dParams& p, T* col, int64_t ld) {
  for (int64_t c = 0; c < s.cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        T* row = col + ((c * s.kh + i) * s.kw + j) * ld;
        const Span cols = valid_outputs(j * p.dilation_w, p.stride_w, p.pad_w, s.w, s.wo);
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + i * p.dilation_h;
          if (ih < 0 || ih >= s.h) continue;
          T* dst = row + oh * s.wo;
          const T* src = x + (c * s.h + ih) * s.w;
          const int64_t shift = j * p.dilation_w - p.pad_w;  // output column ow reads src[ow sw + shift]
          if (p.stride_w == 1) {
#pragma omp simd
            for (int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow] = src[ow + shift];
          } else {
            for (int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow] = src[ow * p.stride_w + shift];
          }
        }
      }
}

// The adjoint of im2col: adds each column entry back into the input position it came from.
template <typename T>
void col2im(const T* col, int64_t ld, const ConvShape& s, const Conv2dParams& p, T* x) {
  for (int64_t c = 0; c < s.cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const T* row = col + ((c * s.kh + i) * s.kw + j) * ld;
        const Span cols = valid_outputs(j * p.dilation_w, p.stride_w, p.pad_w, s.w, s.wo);
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + i * p.dilation_h;
          if (ih < 0 || ih >= s.h) continue;
          T* dst = x + (c * s.h + ih) * s.w;
          const int64_t shift = j * p.dilation_w - p.pad_w;
          const T* src = row + oh * s.wo;
          if (p.stride_w == 1) {
#pragma omp simd
            for (int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow + shift] += src[ow];
          } else {
            for (int64_t ow = cols.begin; ow < cols.end; ++ow) dst[ow * p.stride_w + shift] += src[ow];
          }
        }
      }
}

// Sample n, group g of an NCHW tensor with `channels` per group of `plane` elements each.
template <typename T>
T* group_plane(T* base, int64_t n, int64_t g, int64_t groups, int64_t channels, int64_t plane) {
  return base + (n * groups + g) * channels * plane;
}

// A thread's col buffer for blocks of samples, whose padding entries are
// zeroed once per block width rather than written per sample (most of the
// padding is a pixel at each end of a row: a memset call for 4 bytes).
template <typename T>
class PaddedColumns {
 public:
  PaddedColumns(const ConvShape& s, int64_t block, DType dtype)
      : size_(s.k() * s.pixels()), storage_(empty({size_ * block}, {.dtype = dtype})) {}
  // The buffer laid out for blocks of `count` samples.
  T* for_block(int64_t count) {
    T* col = storage_.data_ptr<T>();
    if (count != zeroed_for_) {
      std::fill(col, col + size_ * count, T(0));
      zeroed_for_ = count;
    }
    return col;
  }

 private:
  int64_t size_;  // one sample's columns
  Tensor storage_;
  int64_t zeroed_for_ = 0;
};

// The columns of samples [first, first + count), group g, side by side:
// col (K, count P), its padding already zero.
template <typename T>
void im2col_block(const T* x, const ConvShape& s, const Conv2dParams& p, int64_t first, int64_t count, int64_t g,
                  T* col) {
  for (int64_t b = 0; b < count; ++b)
    im2col(group_plane(x, first + b, g, s.groups, s.cg, s.plane()), s, p, col + b * s.pixels(),
           count * s.pixels());
}

// One row of the output pass: dst = src + bias, through the fused ReLU if any
// (dst may be src).
template <typename T>
void write_output_row(T* dst, const T* src, T bias, int64_t n, bool relu) {
  if (relu) {
#pragma omp simd
    for (int64_t q = 0; q < n; ++q) dst[q] = relu_value(src[q] + bias);
  } else {
#pragma omp simd
    for (int64_t q = 0; q < n; ++q) dst[q] = src[q] + bias;
  }
}

// dy of samples [first, first + count), group g, as (O_g, count P): gathered
// into `block`, masked where the fused ReLU's output `relu_out` is 0, or read
// in place for a single sample without one.
template <typename T>
const T* gather_dy_block(const T* dy, const T* relu_out, const ConvShape& s, int64_t first, int64_t count, int64_t g,
                         T* block) {
  if (count == 1 && !relu_out) return group_plane(dy, first, g, s.groups, s.og, s.pixels());
  for (int64_t b = 0; b < count; ++b) {
    const T* src = group_plane(dy, first + b, g, s.groups, s.og, s.pixels());
    const T* y = relu_out ? group_plane(relu_out, first + b, g, s.groups, s.og, s.pixels()) : nullptr;
    for (int64_t o = 0; o < s.og; ++o) {
      const T* src_row = src + o * s.pixels();
      T* dst = block + o * count * s.pixels() + b * s.pixels();
      if (!y) {
        std::copy(src_row, src_row + s.pixels(), dst);
        continue;
      }
      relu_gradient_row(src_row, y + o * s.pixels(), s.pixels(), dst);
    }
  }
  return block;
}

// Whether dy must be gathered (rather than read in place) for blocks of `block` samples.
bool gathers_dy(int64_t block, const Tensor& relu_out) { return block > 1 || relu_out.defined(); }

// Runs fn(first, count) over blocks of the samples [begin, end).
template <typename F>
void for_each_block(int64_t begin, int64_t end, int64_t block, F fn) {
  for (int64_t first = begin; first < end; first += block) fn(first, std::min(block, end - first));
}

}  // namespace

void CpuBackend::conv2d(const Tensor& x_t, const Tensor& w_t, const Tensor& bias_t, const Conv2dParams& p,
                        const Tensor& out_t) {
  if (run_in_float32({x_t, w_t, bias_t, out_t}, {3}, [&](const TensorList& t) { conv2d(t[0], t[1], t[2], p, t[3]); }))
    return;
  dispatch_floating(x_t.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const ConvShape s = conv_shape(x_t, w_t, out_t, p);
    const T* x = x_t.data_ptr<T>();
    const T* w = w_t.data_ptr<T>();
    const T* bias = bias_t.defined() ? bias_t.data_ptr<T>() : nullptr;
    T* out = out_t.data_ptr<T>();
    const int64_t block = block_samples(s, sizeof(T));
    parallel_for(s.n, 1, [&](int64_t begin, int64_t end) {
      PaddedColumns<T> columns(s, block, x_t.dtype());
      const bool shallow = is_shallow<T>(s);
      Tensor product_t =
          block > 1 && !shallow ? empty({s.og, block * s.pixels()}, {.dtype = x_t.dtype()}) : Tensor();
      for_each_block(begin, end, block, [&](int64_t first, int64_t count) {
        const int64_t width = count * s.pixels();
        T* col = columns.for_block(count);
        for (int64_t g = 0; g < s.groups; ++g) {
          im2col_block(x, s, p, first, count, g, col);
          const T* w_g = w + g * s.og * s.k();  // (O_g, K)
          if constexpr (std::is_same_v<T, float>) {
            if (shallow) {
              for (int64_t b = 0; b < count; ++b)
                shallow_conv_forward(w_g, col + b * s.pixels(), width, s.k(), s.og, s.pixels(),
                                     bias ? bias + g * s.og : nullptr, p.relu,
                                     group_plane(out, first + b, g, s.groups, s.og, s.pixels()));
              continue;
            }
          }
          if (s.pixels() >= kWideImage) {
            // Wide images: a product per sample straight into its output plane,
            // from its columns within the block's; the bias added in cache.
            for (int64_t b = 0; b < count; ++b) {
              T* dst = group_plane(out, first + b, g, s.groups, s.og, s.pixels());
              gemm<T>({w_g, s.k(), true}, {col + b * s.pixels(), width, true}, dst, s.pixels(), s.og, s.pixels(),
                      s.k());
              if (bias || p.relu)
                for (int64_t o = 0; o < s.og; ++o) {
                  T* row = dst + o * s.pixels();
                  write_output_row(row, row, bias ? bias[g * s.og + o] : T(0), s.pixels(), p.relu);
                }
            }
            continue;
          }
          // A single sample's product is its output plane; a block's is copied out.
          T* product = count == 1 ? group_plane(out, first, g, s.groups, s.og, s.pixels()) : product_t.data_ptr<T>();
          gemm<T>({w_g, s.k(), true}, {col, width, true}, product, width, s.og, width, s.k());
          if (count == 1 && !bias && !p.relu) continue;
          for (int64_t b = 0; b < count; ++b) {
            T* dst = group_plane(out, first + b, g, s.groups, s.og, s.pixels());
            for (int64_t o = 0; o < s.og; ++o)
              write_output_row(dst + o * s.pixels(), product + o * width + b * s.pixels(),
                               bias ? bias[g * s.og + o] : T(0), s.pixels(), p.relu);
          }
        }
      });
    });
  });
}

void CpuBackend::conv2d_backward_input(const Tensor& dy_t, const Tensor& relu_out_t, const Tensor& w_t,
                                       const Conv2dParams& p, const Tensor& dx_t) {
  if (run_in_float32({dy_t, relu_out_t, w_t, dx_t}, {3},
                     [&](const TensorList& t) { conv2d_backward_input(t[0], t[1], t[2], p, t[3]); }))
    return;
  dispatch_floating(dy_t.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    const ConvShape s = conv_shape(dx_t, w_t, dy_t, p);
    const T* dy = dy_t.data_ptr<T>();
    const T* relu_out = relu_out_t.defined() ? relu_out_t.data_ptr<T>() : nullptr;
    const T* w = w_t.data_ptr<T>();
    T* dx = dx_t.data_ptr<T>();
    const int64_t block = block_samples(s, sizeof(T));
    parallel_for(s.n, 1, [&](int64_t begin, int64_t end) {
      std::fill(dx + begin * s.c * s.plane(), dx + end * s.c * s.plane(), T(0));
      Tensor col_t = empty({s.k(), block * s.pixels()}, {.dtype = dy_t.dtype()});
      Tensor dy_block_t =
          gathers_dy(block, relu_out_t) ? empty({s.og, block * s.pixels()}, {.dtype = dy_t.dtype()}) : Tensor();
      T* col = col_t.data_ptr<T>();
      T* dy_block = dy_block_t.defined() ? dy_block_t.data_ptr<T>() : nullptr;
      for_each_block(begin, end, block, [&](int64_t first, int64_t count) {
        const int64_t width = count * s.pixels();
        for (int64_t g = 0; g < s.groups; ++g) {
          const T* dy_g = gather_dy_block(dy, relu_out, s, first, count, g, dy_block);
          // dcol (K, B P) = w_g^T (K, O_g) @ dy_g (O_g, B P)
          gemm<T>({w + g * s.og * s.k(), s.k(), /*row_major=*/false}, {dy_g, width, true}, col, width, s.k(), width,
                  s.og);
          for (int64_t b = 0; b < count; ++b)
            col2im(col + b * s.pixels(), width, s, p, group_plane(dx, first + b, g, s.groups, s.cg, s.plane()));
        }
      });
    });
  });
}

void CpuBackend::conv2d_backward_weight(const Tensor& dy_t, const Tensor& relu_out_t, const Tensor& x_t,
                                        const Conv2dParams& p, const Tensor& dw_t, const Tensor& dbias_t) {
  if (run_in_float32({dy_t, relu_out_t, x_t, dw_t, dbias_t}, {3, 4},
                     [&](const TensorList& t) { conv2d_backward_weight(t[0], t[1], t[2], p, t[3], t[4]); }))
    return;
  dispatch_floating(dy_t.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    const ConvShape s = conv_shape(x_t, dw_t, dy_t, p);
    const T* dy = dy_t.data_ptr<T>();
    const T* relu_out = relu_out_t.defined() ? relu_out_t.data_ptr<T>() : nullptr;
    const T* x = x_t.data_ptr<T>();
    T* dw = dw_t.data_ptr<T>();
    const int64_t block = block_samples(s, sizeof(T));
    // Each chunk of samples sums dw (and the bias gradient, after it)
    // privately; the partials are added in chunk order, so the result does
    // not depend on thread timing.
    const int64_t partial_size = dw_t.numel() + s.o;
    const int64_t chunks = parallel_chunks(s.n, 1);
    Tensor partials_t = zeros({chunks, partial_size}, {.dtype = dw_t.dtype()});
    T* partials = partials_t.data_ptr<T>();
    const bool shallow = is_shallow<T>(s);
    parallel_for_chunks(s.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
      PaddedColumns<T> columns(s, block, x_t.dtype());
      // The gathered dy of a block for the GEMM, or one masked row of it for the shallow kernel.
      Tensor dy_block_t = shallow || gathers_dy(block, relu_out_t)
                              ? empty({shallow ? s.pixels() : s.og * block * s.pixels()}, {.dtype = x_t.dtype()})
                              : Tensor();
      T* dy_block = dy_block_t.defined() ? dy_block_t.data_ptr<T>() : nullptr;
      T* partial = partials + chunk * partial_size;
      for_each_block(begin, end, block, [&](int64_t first, int64_t count) {
        const int64_t width = count * s.pixels();
        T* col = columns.for_block(count);
        for (int64_t g = 0; g < s.groups; ++g) {
          im2col_block(x, s, p, first, count, g, col);
          if constexpr (std::is_same_v<T, float>) {
            if (shallow) {
              for (int64_t b = 0; b < count; ++b)
                shallow_conv_weight_grad(
                    group_plane(dy, first + b, g, s.groups, s.og, s.pixels()),
                    relu_out ? group_plane(relu_out, first + b, g, s.groups, s.og, s.pixels()) : nullptr,
                    col + b * s.pixels(), width, s.k(), s.og, s.pixels(), partial + g * s.og * s.k(),
                    dbias_t.defined() ? partial + dw_t.numel() + g * s.og : nullptr, dy_block);
              continue;
            }
          }
          ConstMatrixMap<T> dy_g(gather_dy_block(dy, relu_out, s, first, count, g, dy_block), s.og, width);
          // dw_g (O_g, K) += dy_g (O_g, B P) @ col^T (B P, K)
          gemm<T>({dy_g.data(), width, true}, {col, width, /*row_major=*/false}, partial + g * s.og * s.k(), s.k(),
                  s.og, s.k(), width, T(1), /*accumulate=*/true);
          if (dbias_t.defined())
            Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>(partial + dw_t.numel() + g * s.og, s.og) +=
                dy_g.rowwise().sum();
        }
      });
    });
    for (int64_t c = 1; c < chunks; ++c)
      for (int64_t i = 0; i < partial_size; ++i) partials[i] += partials[c * partial_size + i];
    std::copy(partials, partials + dw_t.numel(), dw);
    if (dbias_t.defined()) std::copy(partials + dw_t.numel(), partials + partial_size, dbias_t.data_ptr<T>());
  });
}

}  // namespace loom::cpu
