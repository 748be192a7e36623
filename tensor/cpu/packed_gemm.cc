// PackedMatrix's micro-kernel: 6 rows by 16 columns of C in registers (12
// ymm accumulators, 2 for B's row, 1 for A's broadcast: 15 of 16). Each k
// loads B's 16 values, broadcasts 6 of A's, and issues 12 FMAs. A row tile
// runs against every panel while its 6 rows of A stay in L1; the panels
// stream from L2. No K blocking and no prefetching: on the LSTM's shapes
// neither gained, nor did 4 x 24, 5 x 16 or 8 x 8 tiles.
#include "tensor/cpu/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/cpu/gemm_avx512.h"
#include "tensor/cpu/parallel.h"
#include "tensor/creation.h"

namespace loom::cpu {
namespace {

constexpr int kTileRows = 6;
constexpr int64_t kPanelWidth = 16;

// Columns rounded up to whole panels: the last one is padded with zeros.
int64_t padded_columns(int64_t n) { return (n + kPanelWidth - 1) / kPanelWidth * kPanelWidth; }

// c[0:Rows, 0:width) = a[0:Rows, 0:k) panel, where panel is k rows of 16.
// Every loop over the rows is unrolled: GCC keeps the accumulators in
// registers only when it can name each one (a loop left rolled put them on
// the stack, at half Eigen's speed).
// Each row's sums start from `start` (the panel's 16 columns of a bias
// row), or from zero where it is null; then c = alpha sums, or, with
// `accumulate`, c = alpha sums + c in one fused multiply-add. A's element
// (i, p) is at a[i lda + p], or, in a packed column tile (below), at
// a[p kTileRows + i].
template <int Rows, bool PackedColumns>
void micro_kernel(int64_t k, const float* a, int64_t lda, const float* panel, const float* start, float alpha,
                  bool accumulate, float* c, int64_t ldc, int64_t width) {
  const __m256 start_left = start ? _mm256_loadu_ps(start) : _mm256_setzero_ps();
  const __m256 start_right = start ? _mm256_loadu_ps(start + 8) : _mm256_setzero_ps();
  __m256 left[Rows], right[Rows];
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i) {
    left[i] = start_left;
    right[i] = start_right;
  }
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b_left = _mm256_loadu_ps(panel + p * kPanelWidth);
    const __m256 b_right = _mm256_loadu_ps(panel + p * kPanelWidth + 8);
#pragma GCC unroll 8
    for (int i = 0; i < Rows; ++i) {
      const __m256 ai = _mm256_broadcast_ss(PackedColumns ? a + p * kTileRows + i : a + i * lda + p);
      left[i] = _mm256_fmadd_ps(ai, b_left, left[i]);
      right[i] = _mm256_fmadd_ps(ai, b_right, right[i]);
    }
  }
  // c = alpha sums, or c = alpha sums + c rounded once (a fused multiply-add).
  const __m256 scale = _mm256_set1_ps(alpha);
  auto finish = [&](__m256 sums, const float* old) {
    if (accumulate) return _mm256_fmadd_ps(scale, sums, _mm256_loadu_ps(old));
    return alpha == 1.0f ? sums : _mm256_mul_ps(scale, sums);
  };
  if (width == kPanelWidth) {
#pragma GCC unroll 8
    for (int i = 0; i < Rows; ++i) {
      _mm256_storeu_ps(c + i * ldc, finish(left[i], c + i * ldc));
      _mm256_storeu_ps(c + i * ldc + 8, finish(right[i], c + i * ldc + 8));
    }
    return;
  }
  // The last panel, narrower than 16: through a buffer, so nothing past
  // column n is read or written.
  alignas(32) float row[kPanelWidth] = {};
#pragma GCC unroll 8
  for (int i = 0; i < Rows; ++i) {
    if (accumulate) std::memcpy(row, c + i * ldc, sizeof(float) * width);
    _mm256_store_ps(row, finish(left[i], row));
    _mm256_store_ps(row + 8, finish(right[i], row + 8));
    std::memcpy(c + i * ldc, row, sizeof(float) * width);
  }
}

// The part of B a product reads: its first k rows and n columns, in
// panels `stride` floats apart (B's rows times 16).
struct PanelsUsed {
  const float* panels;
  int64_t stride, k, n;
};

// Rows [0, Rows) of c against every panel. A's rows are at a (row i at
// a + i lda) or, PackedColumns, in a packed tile (multiply, below).
// out.bias holds the n starting values padded to whole panels (or is null).
template <int Rows, bool PackedColumns>
void row_tile(const PanelsUsed& b, const PackedOutput& out, const float* a, int64_t lda, float* c, int64_t ldc) {
  for (int64_t j = 0; j < b.n; j += kPanelWidth)
    micro_kernel<Rows, PackedColumns>(b.k, a, lda, b.panels + j / kPanelWidth * b.stride,
                                      out.bias ? out.bias + j : nullptr, out.alpha, out.accumulate, c + j, ldc,
                                      std::min(kPanelWidth, b.n - j));
}

template <bool PackedColumns>
void any_row_tile(int rows, const PanelsUsed& b, const PackedOutput& out, const float* a, int64_t lda, float* c,
                  int64_t ldc) {
  switch (rows) {
    case 6: return row_tile<6, PackedColumns>(b, out, a, lda, c, ldc);
    case 5: return row_tile<5, PackedColumns>(b, out, a, lda, c, ldc);
    case 4: return row_tile<4, PackedColumns>(b, out, a, lda, c, ldc);
    case 3: return row_tile<3, PackedColumns>(b, out, a, lda, c, ldc);
    case 2: return row_tile<2, PackedColumns>(b, out, a, lda, c, ldc);
    case 1: return row_tile<1, PackedColumns>(b, out, a, lda, c, ldc);
  }
}
static_assert(kTileRows == 6, "any_row_tile names each tile height");

// Columns [j0, j0 + 16) of B's k rows, B row-major: a row's 16 values are
// contiguous.
void pack_full_panel_row_major(const float* b, int64_t ld, int64_t k, int64_t j0, float* out) {
  for (int64_t i = 0; i < k; ++i, out += kPanelWidth) {
    _mm256_storeu_ps(out, _mm256_loadu_ps(b + i * ld + j0));
    _mm256_storeu_ps(out + 8, _mm256_loadu_ps(b + i * ld + j0 + 8));
  }
}

// r[0..8) (8 rows of 8) becomes its transpose.
void transpose_8x8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// The same panel with B column-major (a transposed view of a row-major
// matrix: column j's k values are contiguous): 8 x 8 blocks transposed in
// registers, the rows past the last multiple of 8 one value at a time.
void pack_full_panel_column_major(const float* b, int64_t ld, int64_t k, int64_t j0, float* out) {
  int64_t i0 = 0;
  for (; i0 + 8 <= k; i0 += 8) {
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(b + (j0 + 8 * half + j) * ld + i0);
      transpose_8x8(r);
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + (i0 + i) * kPanelWidth + 8 * half, r[i]);
    }
  }
  for (; i0 < k; ++i0)
    for (int64_t j = 0; j < kPanelWidth; ++j) out[i0 * kPanelWidth + j] = b[(j0 + j) * ld + i0];
}

// Panel `j0 / 16` of B: columns [j0, j0 + 16), zero past column n.
void pack_panel(const GemmOperand<float>& b, int64_t k, int64_t n, int64_t j0, float* out) {
  const int64_t width = std::min(kPanelWidth, n - j0);
  if (width == kPanelWidth) {
    if (b.row_major)
      pack_full_panel_row_major(b.data, b.ld, k, j0, out);
    else
      pack_full_panel_column_major(b.data, b.ld, k, j0, out);
    return;
  }
  for (int64_t i = 0; i < k; ++i, out += kPanelWidth) {  // the last, narrower panel
    if (b.row_major) {
      std::memcpy(out, b.data + i * b.ld + j0, sizeof(float) * width);
    } else {
      for (int64_t j = 0; j < width; ++j) out[j] = b.data[(j0 + j) * b.ld + i];
    }
    std::fill(out + width, out + kPanelWidth, 0.0f);
  }
}

}  // namespace

int64_t PackedMatrix::storage_size(int64_t k, int64_t n) {
  return std::max<int64_t>(1, padded_columns(n) * k);
}

PackedMatrix::PackedMatrix(const GemmOperand<float>& b, int64_t k, int64_t n)
    : k_(k), n_(n), owned_(empty({storage_size(k, n)})), panels_(owned_.data_ptr<float>()) {
  pack(b);
}

PackedMatrix::PackedMatrix(const GemmOperand<float>& b, int64_t k, int64_t n, float* storage)
    : k_(k), n_(n), panels_(storage) {
  pack(b);
}

// Panels on threads: packing at each call (packed_gemm) would otherwise be
// the one serial part of a threaded product.
void PackedMatrix::pack(const GemmOperand<float>& b) {
  const int64_t panels = padded_columns(n_) / kPanelWidth;
  parallel_for(panels, items_per_grain(k_ * kPanelWidth), [&](int64_t begin, int64_t end) {
    for (int64_t panel = begin; panel < end; ++panel)
      pack_panel(b, k_, n_, panel * kPanelWidth, panels_ + panel * k_ * kPanelWidth);
  });
}

void PackedMatrix::multiply(const GemmOperand<float>& a, int64_t m, float* c, int64_t ldc,
                            const PackedOutput& out) const {
  multiply_leading(a, m, k_, n_, c, ldc, out);
}

void PackedMatrix::multiply_leading(const GemmOperand<float>& a, int64_t m, int64_t k, int64_t n, float* c,
                                    int64_t ldc, const PackedOutput& out) const {
  LOOM_INTERNAL_ASSERT(k >= 0 && k <= k_ && n >= 0 && n <= n_, "PackedMatrix: ", k, " x ", n,
                       " is not a leading part of ", k_, " x ", n_);
  const PanelsUsed b{panels_, k_ * kPanelWidth, k, n};
  const float* bias = out.bias;
  // The bias padded to whole panels, so the last one reads 16 values too
  // (on the stack up to 16 KB).
  constexpr int64_t kMaxStackBias = 4096;
  float bias_on_stack[kMaxStackBias];
  std::vector<float> bias_on_heap;
  const int64_t padded = padded_columns(n);
  float* padded_bias = nullptr;
  if (bias != nullptr) {
    if (padded > kMaxStackBias) bias_on_heap.resize(padded);
    padded_bias = padded > kMaxStackBias ? bias_on_heap.data() : bias_on_stack;
    std::memcpy(padded_bias, bias, sizeof(float) * n);
    std::fill(padded_bias + n, padded_bias + padded, 0.0f);
    bias = padded_bias;
  }
  const PackedOutput padded_out{bias, out.alpha, out.accumulate};
  // Tiles of 6 rows. A rest of 1-3 rows joins the last full tile and the two
  // split evenly (32 rows: 6, 6, 6, 6, 4, 4, not 6, 6, 6, 6, 6, 2): a thin
  // tile leaves FMA units idle.
  int64_t full = m / kTileRows;
  int rest = static_cast<int>(m % kTileRows), first_short = rest, second_short = 0;
  if (rest > 0 && rest < 4 && full > 0) {
    --full;
    first_short = (kTileRows + rest + 1) / 2;
    second_short = kTileRows + rest - first_short;
  }
  const int64_t tiles = full + (first_short > 0) + (second_short > 0);
  auto height = [&](int64_t t) { return t < full ? kTileRows : t == full ? first_short : second_short; };
  if (a.row_major) {
    for (int64_t t = 0, row = 0; t < tiles; row += height(t), ++t)
      any_row_tile<false>(height(t), b, padded_out, a.data + row * a.ld, a.ld, c + row * ldc, ldc);
    return;
  }
  // A column-major A (a weight gradient's dy^T), read in place, would give
  // each p of a tile a cache line of its own for 6 values. Groups of tiles
  // are copied first, a p at a time (up to 48 contiguous values of column
  // p), into a per-thread buffer where a tile's values of each p sit side
  // by side: tile[p kTileRows + i] = A(i, p). The buffer only grows.
  constexpr int64_t kGroupTiles = 8;
  const int64_t tile_size = k * kTileRows;
  thread_local std::vector<float> buffer;
  if (buffer.size() < static_cast<size_t>(kGroupTiles * tile_size)) buffer.resize(kGroupTiles * tile_size);
  for (int64_t first = 0, row = 0; first < tiles; first += kGroupTiles) {
    const int64_t last = std::min(tiles, first + kGroupTiles);
    for (int64_t p = 0; p < k; ++p) {
      const float* column = a.data + p * a.ld + row;
      for (int64_t t = first; t < last; column += height(t), ++t) {
        float* to = buffer.data() + (t - first) * tile_size + p * kTileRows;
        if (height(t) == kTileRows)
          std::memcpy(to, column, sizeof(float) * kTileRows);
        else
          std::memcpy(to, column, sizeof(float) * height(t));
      }
    }
    for (int64_t t = first; t < last; row += height(t), ++t)
      any_row_tile<true>(height(t), b, padded_out, buffer.data() + (t - first) * tile_size, kTileRows, c + row * ldc,
                         ldc);
  }
}

constexpr int64_t kPackedMinRows = 16;
constexpr int64_t kPackedMinColumns = 16;
constexpr int64_t kPackedMaxRight = int64_t{1} << 18;  // elements: 1 MB
// A column-major left operand is copied 48 rows at a time, k values each:
// past this depth the copies no longer stay near the core (k = 4096: 0.85x
// Eigen's rate).
constexpr int64_t kPackedMaxColumnsDepth = 1024;

bool packed_gemm_wins(int64_t m, int64_t n, int64_t k, bool a_row_major) {
  // The last panel computes 16 columns however few are left: at most an
  // eighth of the work may be padding (n = 65, 5 panels for 65 columns,
  // ran at 0.91x Eigen's rate).
  const int64_t padded = padded_columns(n);
  return m >= kPackedMinRows && n >= kPackedMinColumns && k > 0 && k * n <= kPackedMaxRight &&
         8 * (padded - n) <= padded && (a_row_major || k <= kPackedMaxColumnsDepth) && !avx512_gemm_enabled();
}

void packed_gemm(const GemmOperand<float>& a, const GemmOperand<float>& b, float* c, int64_t ldc, int64_t m, int64_t n,
                 int64_t k, const PackedOutput& out) {
  // B's panels in memory this thread keeps (it only grows): no allocation
  // per product, and products on several threads at once (the attention's
  // (batch, head) slices) each pack into their own.
  thread_local std::vector<float> storage;
  const int64_t size = PackedMatrix::storage_size(k, n);
  if (storage.size() < static_cast<size_t>(size)) storage.resize(size);
  const PackedMatrix packed(b, k, n, storage.data());
  const int64_t tiles = (m + kTileRows - 1) / kTileRows;
  const int64_t tiles_per_grain = std::max<int64_t>(1, (int64_t{1} << 18) / (kTileRows * n * k));
  const int64_t row_step = a.row_major ? a.ld : 1;
  parallel_for(tiles, tiles_per_grain, [&](int64_t begin, int64_t end) {
    const int64_t first = begin * kTileRows, rows = std::min(m, end * kTileRows) - first;
    packed.multiply({a.data + first * row_step, a.ld, a.row_major}, rows, c + first * ldc, ldc, out);
  });
}

}  // namespace loom::cpu
