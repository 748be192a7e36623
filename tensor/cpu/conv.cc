// CPU 2-D convolution as im2col + GEMM, one sample per thread.
//
// For each sample and group, im2col lays the receptive field of every output
// pixel out as a column: col (C_g kH kW, H_out W_out). The convolution is then
// one matrix product with the weight viewed as (C_out_g, C_g kH kW). The
// backward passes are the two other products of the same three matrices, and
// col2im (the adjoint of im2col) scatters the input gradient back.
#include <Eigen/Core>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"
#include "tensor/creation.h"

namespace loom::cpu {
namespace {

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using MatrixMap = Eigen::Map<RowMatrix<T>>;
template <typename T>
using ConstMatrixMap = Eigen::Map<const RowMatrix<T>>;

struct ConvShape {
  int64_t n, c, h, w;        // input
  int64_t o, kh, kw;         // weight: o output channels
  int64_t ho, wo;            // output
  int64_t groups, cg, og;    // channels per group, in and out
  int64_t k() const { return cg * kh * kw; }  // rows of col
  int64_t pixels() const { return ho * wo; }
};

ConvShape conv_shape(const Tensor& x, const Tensor& w, const Tensor& out, const Conv2dParams& p) {
  ConvShape s{x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2), w.size(3),
              out.size(2), out.size(3), p.groups, x.size(1) / p.groups, w.size(0) / p.groups};
  return s;
}

// col[(c kh + i) kw + j][oh wo + ow] = x[c][oh sh - ph + i dh][ow sw - pw + j dw], or 0 in the padding.
template <typename T>
void im2col(const T* x, const ConvShape& s, const Conv2dParams& p, T* col) {
  for (int64_t c = 0; c < s.cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        T* row = col + ((c * s.kh + i) * s.kw + j) * s.pixels();
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + i * p.dilation_h;
          T* dst = row + oh * s.wo;
          if (ih < 0 || ih >= s.h) {
            std::fill(dst, dst + s.wo, T(0));
            continue;
          }
          const T* src = x + (c * s.h + ih) * s.w;
          for (int64_t ow = 0; ow < s.wo; ++ow) {
            const int64_t iw = ow * p.stride_w - p.pad_w + j * p.dilation_w;
            dst[ow] = (iw >= 0 && iw < s.w) ? src[iw] : T(0);
          }
        }
      }
}

// The adjoint of im2col: adds each column entry back into the input position it came from.
template <typename T>
void col2im(const T* col, const ConvShape& s, const Conv2dParams& p, T* x) {
  for (int64_t c = 0; c < s.cg; ++c)
    for (int64_t i = 0; i < s.kh; ++i)
      for (int64_t j = 0; j < s.kw; ++j) {
        const T* row = col + ((c * s.kh + i) * s.kw + j) * s.pixels();
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t ih = oh * p.stride_h - p.pad_h + i * p.dilation_h;
          if (ih < 0 || ih >= s.h) continue;
          T* dst = x + (c * s.h + ih) * s.w;
          for (int64_t ow = 0; ow < s.wo; ++ow) {
            const int64_t iw = ow * p.stride_w - p.pad_w + j * p.dilation_w;
            if (iw >= 0 && iw < s.w) dst[iw] += row[oh * s.wo + ow];
          }
        }
      }
}

// Pointers to sample n, group g of an NCHW tensor with `channels` per group.
template <typename T>
T* group_plane(T* base, int64_t n, int64_t g, int64_t groups, int64_t channels_per_group, int64_t plane) {
  return base + (n * groups + g) * channels_per_group * plane;
}

}  // namespace

void CpuBackend::conv2d(const Tensor& x_t, const Tensor& w_t, const Conv2dParams& p, const Tensor& out_t) {
  dispatch_floating(x_t.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const ConvShape s = conv_shape(x_t, w_t, out_t, p);
    const T* x = x_t.data_ptr<T>();
    const T* w = w_t.data_ptr<T>();
    T* out = out_t.data_ptr<T>();
    parallel_for(s.n, 1, [&](int64_t begin, int64_t end) {
      Tensor col_t = empty({s.k(), s.pixels()}, {.dtype = x_t.dtype()});
      T* col = col_t.data_ptr<T>();
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < s.groups; ++g) {
          im2col(group_plane(x, n, g, s.groups, s.cg, s.h * s.w), s, p, col);
          MatrixMap<T>(group_plane(out, n, g, s.groups, s.og, s.pixels()), s.og, s.pixels()).noalias() =
              ConstMatrixMap<T>(w + g * s.og * s.k(), s.og, s.k()) * ConstMatrixMap<T>(col, s.k(), s.pixels());
        }
    });
  });
}

void CpuBackend::conv2d_backward_input(const Tensor& dy_t, const Tensor& w_t, const Conv2dParams& p,
                                       const Tensor& dx_t) {
  dispatch_floating(dy_t.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    const ConvShape s = conv_shape(dx_t, w_t, dy_t, p);
    const T* dy = dy_t.data_ptr<T>();
    const T* w = w_t.data_ptr<T>();
    T* dx = dx_t.data_ptr<T>();
    std::fill(dx, dx + dx_t.numel(), T(0));
    parallel_for(s.n, 1, [&](int64_t begin, int64_t end) {
      Tensor col_t = empty({s.k(), s.pixels()}, {.dtype = dy_t.dtype()});
      T* col = col_t.data_ptr<T>();
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < s.groups; ++g) {
          // dcol (K, P) = w_g^T (K, O_g) @ dy_g (O_g, P)
          MatrixMap<T>(col, s.k(), s.pixels()).noalias() =
              ConstMatrixMap<T>(w + g * s.og * s.k(), s.og, s.k()).transpose() *
              ConstMatrixMap<T>(group_plane(dy, n, g, s.groups, s.og, s.pixels()), s.og, s.pixels());
          col2im(col, s, p, group_plane(dx, n, g, s.groups, s.cg, s.h * s.w));
        }
    });
  });
}

void CpuBackend::conv2d_backward_weight(const Tensor& dy_t, const Tensor& x_t, const Conv2dParams& p,
                                        const Tensor& dw_t) {
  dispatch_floating(dy_t.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    const ConvShape s = conv_shape(x_t, dw_t, dy_t, p);
    const T* dy = dy_t.data_ptr<T>();
    const T* x = x_t.data_ptr<T>();
    T* dw = dw_t.data_ptr<T>();
    // Each chunk of samples sums its dw privately; the partials are added in
    // chunk order, so the result does not depend on thread timing.
    const int64_t chunks = parallel_chunks(s.n, 1);
    Tensor partials_t = zeros({chunks, dw_t.numel()}, {.dtype = dw_t.dtype()});
    T* partials = partials_t.data_ptr<T>();
    parallel_for_chunks(s.n, 1, [&](int64_t chunk, int64_t begin, int64_t end) {
      Tensor col_t = empty({s.k(), s.pixels()}, {.dtype = x_t.dtype()});
      T* col = col_t.data_ptr<T>();
      T* partial = partials + chunk * dw_t.numel();
      for (int64_t n = begin; n < end; ++n)
        for (int64_t g = 0; g < s.groups; ++g) {
          im2col(group_plane(x, n, g, s.groups, s.cg, s.h * s.w), s, p, col);
          // dw_g (O_g, K) += dy_g (O_g, P) @ col^T (P, K)
          MatrixMap<T>(partial + g * s.og * s.k(), s.og, s.k()).noalias() +=
              ConstMatrixMap<T>(group_plane(dy, n, g, s.groups, s.og, s.pixels()), s.og, s.pixels()) *
              ConstMatrixMap<T>(col, s.k(), s.pixels()).transpose();
        }
    });
    std::fill(dw, dw + dw_t.numel(), T(0));
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < dw_t.numel(); ++i) dw[i] += partials[c * dw_t.numel() + i];
  });
}

}  // namespace loom::cpu
