// float8 training's kernels on the CPU, simulated: the casts write the bytes
// the GPU's cast kernel writes (both call float8_rounding.h), and the product
// multiplies the codes' exact values in float32 with Eigen, where the GPU's
// tensor cores multiply the codes themselves. Only the order of the float32
// sums differs between the two.
#include <vector>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/parallel.h"
#include "tensor/float8_rounding.h"

namespace loom::cpu {
namespace {

// Every code's value in `format`, for decoding by lookup.
std::vector<float> decode_table(Float8Format format) {
  std::vector<float> table(256);
  for (int code = 0; code < 256; ++code) table[code] = float8::decode(static_cast<uint8_t>(code), format);
  return table;
}

// The exact values of the codes in `bits`.
std::vector<float> decoded(const Tensor& bits, Float8Format format) {
  const std::vector<float> table = decode_table(format);
  const uint8_t* codes = bits.data_ptr<uint8_t>();
  std::vector<float> values(bits.numel());
  parallel_for(bits.numel(), kParallelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) values[i] = table[codes[i]];
  });
  return values;
}

}  // namespace

void CpuBackend::float8_cast(const Tensor& x, const Tensor& amax, Float8Format format, const Tensor& bits,
                             const Tensor& bits_t, const Tensor& inv_scale) {
  const float scale = float8::scale_for_amax(*amax.data_ptr<float>(), format);
  *inv_scale.data_ptr<float>() = 1.0f / scale;
  const int64_t rows = x.size(0), cols = x.size(1);
  uint8_t* out = bits.data_ptr<uint8_t>();
  uint8_t* out_t = bits_t.defined() ? bits_t.data_ptr<uint8_t>() : nullptr;
  dispatch_storage(x.dtype(), "float8_cast", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x.raw_data());  // data_ptr has no 16-bit instances
    parallel_for(rows, items_per_grain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t c = 0; c < cols; ++c) {
          // float(x) * scale in float32, as torchao and the CUDA kernel compute it.
          const float scaled = static_cast<float>(in[r * cols + c]) * scale;
          const uint8_t code = float8::encode(scaled, format);
          out[r * cols + c] = code;
          if (out_t) out_t[c * rows + r] = code;
        }
    });
  });
}

void CpuBackend::float8_matmul(const Tensor& a, Float8Format a_format, const Tensor& a_inv_scale, const Tensor& b,
                               Float8Format b_format, const Tensor& b_inv_scale, const Tensor& bias,
                               const Tensor& out) {
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  const std::vector<float> av = decoded(a, a_format), bv = decoded(b, b_format);
  // a (M, K) row-major; b (N, K) row-major is b^T (K, N) column-major.
  std::vector<float> product(m * n);
  gemm<float>({av.data(), k, true}, {bv.data(), k, false}, product.data(), n, m, n, k);
  const float scale = *a_inv_scale.data_ptr<float>() * *b_inv_scale.data_ptr<float>();
  dispatch_storage(out.dtype(), "float8_matmul", [&](auto tag) {
    using T = decltype(tag);
    T* y = static_cast<T*>(out.raw_data());
    const T* add = bias.defined() ? static_cast<const T*>(bias.raw_data()) : nullptr;
    parallel_for(m, items_per_grain(n), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float value = scale * product[i * n + j];
          if (add) value += static_cast<float>(add[j]);
          y[i * n + j] = static_cast<T>(value);
        }
    });
  });
}

}  // namespace loom::cpu
