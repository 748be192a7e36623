// The float8 cast (tensor/backend.h float8_cast) on the GPU: x * scale
// rounded to float8 codes by float8_rounding.h, the function the CPU
// backend calls, so both write the same bytes. The scale is computed from
// the amax in device memory by every thread (one float64 division), so the
// host never reads it.
//
// Each block casts one 32 x 32 tile: its rows are read and the codes written
// along x's rows, and the same codes go through shared memory to be written
// along the transposed copy's rows, so both writes are coalesced.
#include <cstdint>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/launch.h"
#include "tensor/float8_rounding.h"

namespace loom::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;  // a block is kTile x kTileRowsPerPass threads

// x (rows, cols) -> bits (rows, cols) and, when bits_t is not null, bits_t (cols, rows).
template <typename S>
__global__ void float8_cast_kernel(const S* __restrict__ x, int64_t rows, int64_t cols, int64_t col_tiles,
                                   const float* __restrict__ amax, Float8Format format, uint8_t* __restrict__ bits,
                                   uint8_t* __restrict__ bits_t, float* __restrict__ inv_scale) {
  // 4 bytes of padding per row: a warp reading a column touches 32 banks (stride 9 words).
  __shared__ uint8_t tile[kTile][kTile + 4];
  const float scale = float8::scale_for_amax(*amax, format);
  if (blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) *inv_scale = 1.0f / scale;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / col_tiles) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x % col_tiles) * kTile;
  for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) {
      const uint8_t code = float8::encode(static_cast<float>(widen(x[r * cols + c])) * scale, format);
      bits[r * cols + c] = code;
      tile[i][threadIdx.x] = code;
    }
  }
  if (bits_t == nullptr) return;  // the same for the whole block: no thread waits below
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;  // element (r, c) of x is (c, r) of bits_t
    if (c < cols && r < rows) bits_t[c * rows + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

void CudaBackend::float8_cast(const Tensor& x, const Tensor& amax, Float8Format format, const Tensor& bits,
                              const Tensor& bits_t, const Tensor& inv_scale) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const int64_t col_tiles = ceil_div(cols, kTile), tiles = ceil_div(rows, kTile) * col_tiles;
  LOOM_CHECK(tiles <= INT32_MAX, "float8_cast: a matrix of ", rows, " x ", cols, " is more than ", INT32_MAX,
             " tiles of ", kTile, " x ", kTile);
  dispatch_floating_or_16bit(x.dtype(), "float8_cast", [&](auto storage, auto) {
    using S = decltype(storage);
    LaunchContext ctx(x);
    float8_cast_kernel<S><<<static_cast<unsigned>(tiles), dim3(kTile, kTileRowsPerPass), 0, ctx.stream>>>(
        data_of<S>(x), rows, cols, col_tiles, data_of<float>(amax), format, data_of<uint8_t>(bits),
        data_of<uint8_t>(bits_t), data_of<float>(inv_scale));
    LOOM_CUDA_LAUNCH_CHECK(ctx.stream);
  });
}

}  // namespace loom::cuda
