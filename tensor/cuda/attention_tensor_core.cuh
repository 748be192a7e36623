// Fused attention for bfloat16 and float16 on tensor cores: the algorithm of
// attention_kernels.cuh (FlashAttention-2's; the formulas are there), with
// each tile's products on the warp matrix units (nvcuda::wmma, 16 x 16 x 16
// fragments of the 16-bit type, accumulated in float). An H100 does over ten
// times the FLOP/s on them as on the FP32 cores that the SIMT kernels use;
// float32 and float64 stay on those.
//
// A block is 4 warps; each warp owns 16 rows (a fragment's height) of the
// block's 64 and walks the tiles of the other side:
//   forward (queries), key tiles of 64: S = Q_w K^T, online softmax, O += P V.
//   dk, dv  (keys), query tiles: S^T = K_w Q^T, dP^T = V_w dout^T, P^T and
//           dS^T, dv += P^T dout, dk += dS^T Q.
//   dq      (queries), key tiles: S = Q_w K^T, dP = dout_w V^T, P and dS,
//           dq += dS K.
// The backward's tiles are 64, or 32 at the head-dim bound 128, so that two
// blocks fit an SM's shared memory. Delta (dout . out per row) is
// attention_kernels.cuh's kernel.
//
// Which lane holds which element of a fragment is unspecified, so nothing
// here relies on it: a product is stored (store_matrix_sync) to a per-warp
// float scratch in shared memory, and after a __syncwarp the lanes work on
// it by rows, two lanes per row (lane l: row l / 2, the columns of parity
// l % 2). The forward's running max, sum and output rows live in those
// lanes' registers: each key tile's P V goes through the scratch and is
// added to the rescaled rows. The backward's dk, dv and dq stay in
// accumulator fragments across the loop (no per-row rescaling) and are
// scaled and rounded through the scratch at the end.
//
// Precision, as FlashAttention-2: P and dS are rounded to the 16-bit type to
// be a product's operand (the tensor cores take 16-bit operands); scores,
// softmax statistics, logsumexp, delta and every accumulation are float.
// With the outputs' own rounding that makes out, dq, dk and dv about 1e-2
// (relative to each one's largest element) off exact attention.
//
// Shared memory: tiles of 16-bit rows, 8 elements (16 bytes) of padding, so
// that the 8 rows of an 8 x 16-byte fragment load start in different banks;
// float scratch rows padded by 4. WMMA needs each fragment's pointer 32-byte
// aligned and its row pitch (ldm) a multiple of 16 bytes: every region below
// starts at a multiple of 32 bytes (static_asserts), and fragments start at
// multiples of 16 rows and 16 columns in them. Global rows are read and
// written 8 elements (16 bytes) at a time where the address allows, else
// element by element; rows past the end and columns past the head dim are
// loaded as 0 and masked scores become -inf (P = 0), as in the SIMT kernels.
// No atomics: each output element is written once, so results are deterministic.
//
// With LOOM_CUDA_EMULATION these compile as host C++ for
// tests/cuda/attention_emulated_test.cc: tests/cuda/cuda_emulation.h provides
// the WMMA subset used here and an emulated __nv_bfloat16.
#pragma once

#include <cstdint>
#include <type_traits>

#ifndef LOOM_CUDA_EMULATION
#include <mma.h>
#endif

#include "tensor/cuda/attention_kernels.cuh"

namespace loom::cuda {

namespace wmma = nvcuda::wmma;

constexpr int kTensorCoreWarps = 4;
constexpr int kTensorCoreThreads = 32 * kTensorCoreWarps;
constexpr int kTensorCoreRows = 16 * kTensorCoreWarps;  // a block's queries (forward, dq) or keys (dk, dv)
constexpr int kForwardKeyTile = 64;
constexpr int kHalfBytes = 2;  // bfloat16 and float16

// The query tile of dk/dv and the key tile of dq.
template <int HEAD>
constexpr int backward_tile() {
  return HEAD > 64 ? 32 : 64;
}

// Row pitches, in elements, of 16-bit and float rows of `cols` elements.
constexpr int half_pitch(int cols) { return cols + 8; }
constexpr int float_pitch(int cols) { return cols + 4; }

// Bytes of a region of `rows` rows of `cols` 16-bit or float elements.
constexpr int half_bytes(int rows, int cols) { return rows * half_pitch(cols) * kHalfBytes; }
constexpr int float_bytes(int rows, int cols) { return rows * float_pitch(cols) * 4; }

// Dynamic shared memory of each kernel, in bytes (the regions in the order
// the kernels lay them out). Each kernel's staging of its outputs at the end
// reuses the start: 64 float rows of HEAD.
template <int HEAD>
constexpr int tensor_core_forward_shared_bytes() {  // Q, K, V; P; scratch for S and P V
  return 3 * half_bytes(kTensorCoreRows, HEAD) + half_bytes(kTensorCoreRows, kForwardKeyTile) +
         float_bytes(kTensorCoreRows, HEAD > kForwardKeyTile ? HEAD : kForwardKeyTile);
}
template <int HEAD>
constexpr int tensor_core_dkdv_shared_bytes() {  // K, V; Q, dout; P^T, dS^T; S^T, dP^T scratch; L, delta
  constexpr int T = backward_tile<HEAD>();
  return 2 * half_bytes(kTensorCoreRows, HEAD) + 2 * half_bytes(T, HEAD) + 2 * half_bytes(kTensorCoreRows, T) +
         2 * float_bytes(kTensorCoreRows, T) + 2 * T * 4;
}
template <int HEAD>
constexpr int tensor_core_dq_shared_bytes() {  // Q, dout; K, V; dS; S, dP scratch
  constexpr int T = backward_tile<HEAD>();
  return 2 * half_bytes(kTensorCoreRows, HEAD) + 2 * half_bytes(T, HEAD) + half_bytes(kTensorCoreRows, T) +
         2 * float_bytes(kTensorCoreRows, T);
}

// WMMA's alignment rules, for every region size used above.
static_assert(half_bytes(16, 32) % 32 == 0 && half_bytes(16, 64) % 32 == 0 && half_bytes(16, 128) % 32 == 0 &&
                  float_bytes(16, 32) % 32 == 0 && float_bytes(16, 64) % 32 == 0 && float_bytes(16, 128) % 32 == 0,
              "shared regions must keep WMMA's 32-byte fragment alignment");
static_assert(half_pitch(0) % 8 == 0 && float_pitch(0) % 4 == 0, "WMMA's ldm must be a multiple of 16 bytes");

using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

template <typename T>
__device__ __forceinline__ T* tensor_core_shared() {
#ifdef LOOM_CUDA_EMULATION
  return reinterpret_cast<T*>(emulated_dynamic_shared());
#else
  extern __shared__ __align__(128) unsigned char attention_tensor_core_shared[];
  return reinterpret_cast<T*>(attention_tensor_core_shared);
#endif
}

// Eight 16-bit elements: one 16-byte access.
template <typename S>
struct alignas(16) Octet {
  S v[8];
};

__device__ __forceinline__ bool aligned_16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The block copies rows [first, first + ROWS) of one head's (rows, width)
// matrix into a tile of HEAD columns, with 0 past `rows` and past `width`.
template <int ROWS, int HEAD, typename S>
__device__ __forceinline__ void load_half_rows(S* tile, const S* matrix, int64_t row_stride, int first, int rows,
                                               int width) {
  constexpr int CHUNKS = HEAD / 8;
  for (int e = threadIdx.x; e < ROWS * CHUNKS; e += kTensorCoreThreads) {
    const int r = e / CHUNKS, c = 8 * (e % CHUNKS), row = first + r;
    Octet<S> x;
    const S* from = matrix + row * row_stride + c;
    if (row < rows && c + 8 <= width && aligned_16(from)) {
      x = *reinterpret_cast<const Octet<S>*>(from);
    } else {
#pragma unroll
      for (int u = 0; u < 8; ++u) x.v[u] = row < rows && c + u < width ? from[u] : narrow_to<S>(0.0f);
    }
    *reinterpret_cast<Octet<S>*>(tile + r * half_pitch(HEAD) + c) = x;
  }
}

// The warp stores its 16 rows of an output (rows first_row + r of a (rows,
// width) matrix) from float staging, times `factor`, rounded once.
template <int HEAD, typename S>
__device__ __forceinline__ void store_warp_rows(S* matrix, int64_t row_stride, int first_row, int rows, int width,
                                                const float* staging, int pitch, float factor) {
  constexpr int CHUNKS = HEAD / 8;
  for (int e = threadIdx.x % 32; e < 16 * CHUNKS; e += 32) {
    const int r = e / CHUNKS, c = 8 * (e % CHUNKS), row = first_row + r;
    if (row >= rows || c >= width) continue;
    const Quad<float> low = load_quad(staging + r * pitch + c), high = load_quad(staging + r * pitch + c + 4);
    Octet<S> x;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      x.v[u] = narrow_to<S>(low.v[u] * factor);
      x.v[u + 4] = narrow_to<S>(high.v[u] * factor);
    }
    S* to = matrix + row * row_stride + c;
    if (c + 8 <= width && aligned_16(to)) {
      *reinterpret_cast<Octet<S>*>(to) = x;
    } else {
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (c + u < width) to[u] = x.v[u];
    }
  }
}

// wmma::load_matrix_sync from shared memory. For bfloat16, nvcc (CUDA 13.0)
// does not see that the pointer is shared, as it does for float16, and
// lowers the load to 32-bit generic loads (LD.E) instead of ldmatrix; the
// same PTX instruction with the .shared state space gets ldmatrix back (the
// macro writes load_shared's r from its address and ldm).
#define LOOM_WMMA_LOAD_SHARED_BF16(USE, LAYOUT)                                                              \
  asm volatile("wmma.load." USE ".sync.aligned." LAYOUT ".m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;" \
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                              \
               : "l"(address), "r"(ldm)                                                                      \
               : "memory")
template <typename Use, typename Layout, typename S>
__device__ __forceinline__ void load_shared(wmma::fragment<Use, 16, 16, 16, S, Layout>& f, const S* p, unsigned ldm) {
#ifndef LOOM_CUDA_EMULATION
  if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    static_assert(sizeof(f.x) == 4 * sizeof(unsigned), "a bfloat16 fragment is 4 registers");
    unsigned* r = reinterpret_cast<unsigned*>(f.x);
    const size_t address = __cvta_generic_to_shared(p);
    constexpr bool a = std::is_same_v<Use, wmma::matrix_a>, row = std::is_same_v<Layout, wmma::row_major>;
    if constexpr (a && row)
      LOOM_WMMA_LOAD_SHARED_BF16("a", "row");
    else if constexpr (a)
      LOOM_WMMA_LOAD_SHARED_BF16("a", "col");
    else if constexpr (row)
      LOOM_WMMA_LOAD_SHARED_BF16("b", "row");
    else
      LOOM_WMMA_LOAD_SHARED_BF16("b", "col");
  } else
#endif
  {
    wmma::load_matrix_sync(f, p, ldm);
  }
}
#undef LOOM_WMMA_LOAD_SHARED_BF16

// acc[j] += A B_j for the warp, where A (16 x depth) is row-major at `a`
// (row pitch lda) and B_j is column block j (columns [16 j, 16 j + 16)) of
// B (depth x 16 BLOCKS) at `b`: row-major (B[k][c] = b[k ldb + c]) or, with
// Layout col_major, as B^T's rows (B[k][c] = b[c ldb + k]: K^T read from K's
// rows). Only k-steps below `depth` (A's further columns are 0) and blocks
// below `width` (the rest of acc is left as it is).
template <int MAX_DEPTH, typename Layout, int BLOCKS, typename S>
__device__ __forceinline__ void warp_product(Accumulator (&acc)[BLOCKS], const S* a, int lda, const S* b, int ldb,
                                             int depth, int width) {
  constexpr bool b_row_major = std::is_same_v<Layout, wmma::row_major>;
#pragma unroll
  for (int k = 0; k < MAX_DEPTH; k += 16) {
    if (k >= depth) break;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, S, wmma::row_major> a_part;
    load_shared(a_part, a + k, lda);
#pragma unroll
    for (int j = 0; j < BLOCKS; ++j) {
      if (16 * j >= width) break;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, S, Layout> b_part;
      load_shared(b_part, b_row_major ? b + k * ldb + 16 * j : b + 16 * j * ldb + k, ldb);
      wmma::mma_sync(acc[j], a_part, b_part, acc[j]);
    }
  }
}

template <int BLOCKS>
__device__ __forceinline__ void clear_blocks(Accumulator (&acc)[BLOCKS]) {
#pragma unroll
  for (int j = 0; j < BLOCKS; ++j) wmma::fill_fragment(acc[j], 0.0f);
}

// Stores acc's blocks side by side into float rows at `to` (row pitch `pitch`).
template <int BLOCKS>
__device__ __forceinline__ void store_blocks(float* to, int pitch, const Accumulator (&acc)[BLOCKS]) {
#pragma unroll
  for (int j = 0; j < BLOCKS; ++j) wmma::store_matrix_sync(to + 16 * j, acc[j], pitch, wmma::mem_row_major);
}

// Column i of the lane's COLS / 2 in its row r: the columns of parity `half`,
// rotated by 2 in rows 8 to 15, so that the 32 lanes' reads of float rows
// 4 banks apart (pitch = 4 mod 32) fall in 32 different banks.
template <int COLS>
__device__ __forceinline__ int lane_column(int i, int r, int half) {
  return (2 * i + half + 2 * (r / 8)) % COLS;
}

// grid (ceil(Tq / 64), H, B). out and logsumexp (B, H, Tq) are written.
template <typename S, int HEAD>
__global__ void __launch_bounds__(kTensorCoreThreads,
                                  resident_blocks<float, tensor_core_forward_shared_bytes<HEAD>()>())
    attention_forward_tensor_core_kernel(AttentionOperand<const S> q, AttentionOperand<const S> k,
                                         AttentionOperand<const S> v, AttentionOperand<S> out, float* logsumexp,
                                         AttentionSizes n, float scale, bool causal) {
  static_assert(sizeof(S) == kHalfBytes, "the tensor-core kernels take 16-bit storage");
  constexpr int KT = kForwardKeyTile, HP = half_pitch(HEAD), PP = half_pitch(KT);
  constexpr int FP = float_pitch(HEAD > KT ? HEAD : KT);
  S* q_tile = tensor_core_shared<S>();
  S* k_tile = q_tile + kTensorCoreRows * HP;
  S* v_tile = k_tile + KT * HP;
  S* p_tile = v_tile + KT * HP;
  float* scratch = reinterpret_cast<float*>(p_tile + kTensorCoreRows * PP);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int b = blockIdx.z, h = blockIdx.y;
  const int first_query = blockIdx.x * kTensorCoreRows;
  const int query = first_query + 16 * warp + r;  // the lane's row
  const S* q_rows = q_tile + 16 * warp * HP;      // the warp's
  S* p_rows = p_tile + 16 * warp * PP;
  float* s_rows = scratch + 16 * warp * FP;  // the warp's S, then its P V
  const S* k_head = k.head(b, h);
  const S* v_head = v.head(b, h);
  load_half_rows<kTensorCoreRows, HEAD>(q_tile, q.head(b, h), q.row_stride, first_query, n.queries, n.qk_dim);

  // The lane's row: running max and sum (of its columns only, until the
  // end), and output columns lane_column<HEAD>(i).
  float row_max = -math::infinity<float>(), row_sum = 0;
  float o[HEAD / 2];
#pragma unroll
  for (int i = 0; i < HEAD / 2; ++i) o[i] = 0;
  // Tile 0 holds key 0, seen by every row, so each running max is finite
  // from the first tile on.
  const int key_end = keys_seen_by_tile(first_query, kTensorCoreRows, n, causal);
  for (int first_key = 0; first_key < key_end; first_key += KT) {
    __syncthreads();  // every warp is done with the previous k_tile, v_tile
    load_half_rows<KT, HEAD>(k_tile, k_head, k.row_stride, first_key, n.keys, n.qk_dim);
    load_half_rows<KT, HEAD>(v_tile, v_head, v.row_stride, first_key, n.keys, n.v_dim);
    __syncthreads();
    {
      Accumulator s[KT / 16];
      clear_blocks(s);
      warp_product<HEAD, wmma::col_major>(s, q_rows, HP, k_tile, HP, n.qk_dim, KT);
      store_blocks(s_rows, FP, s);
    }
    __syncwarp();  // S is in s_rows for every lane

    float x[KT / 2];
    float tile_max = -math::infinity<float>();
#pragma unroll
    for (int i = 0; i < KT / 2; ++i) {
      const int c = lane_column<KT>(i, r, half), key = first_key + c;
      const bool seen = key < n.keys && sees(query, key, n, causal);
      x[i] = seen ? scale * s_rows[r * FP + c] : -math::infinity<float>();
      tile_max = larger(tile_max, x[i]);
    }
    const float new_max = larger(row_max, larger(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1)));
    const float rescale = math::exp(row_max - new_max);  // 0 on the first tile
    row_max = new_max;
    row_sum *= rescale;
#pragma unroll
    for (int i = 0; i < HEAD / 2; ++i) o[i] *= rescale;
#pragma unroll
    for (int i = 0; i < KT / 2; ++i) {
      const float p = math::exp(x[i] - new_max);  // masked: exp(-inf) = 0
      row_sum += p;
      p_rows[r * PP + lane_column<KT>(i, r, half)] = narrow_to<S>(p);  // rounded: a tensor-core operand
    }
    __syncwarp();  // P is in p_rows, and every lane is done reading S

    // P V in blocks of 64 columns (4 accumulators at a time), through s_rows.
#pragma unroll
    for (int g = 0; g < HEAD / 64; ++g) {
      Accumulator pv[4];
      clear_blocks(pv);
      warp_product<KT, wmma::row_major>(pv, p_rows, PP, v_tile + 64 * g, HP, KT, n.v_dim - 64 * g);
      store_blocks(s_rows + 64 * g, FP, pv);
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < HEAD / 2; ++i) o[i] += s_rows[r * FP + lane_column<HEAD>(i, r, half)];
  }

  const float sum = row_sum + __shfl_xor_sync(0xffffffffu, row_sum, 1);
  __syncwarp();  // every lane is done reading s_rows
#pragma unroll
  for (int i = 0; i < HEAD / 2; ++i) s_rows[r * FP + lane_column<HEAD>(i, r, half)] = o[i] / sum;
  if (half == 0 && query < n.queries)
    logsumexp[(static_cast<int64_t>(b) * n.heads + h) * n.queries + query] = row_max + math::log(sum);
  __syncwarp();
  store_warp_rows<HEAD>(out.head(b, h), out.row_stride, first_query + 16 * warp, n.queries, n.v_dim, s_rows, FP, 1.0f);
}

// grid (ceil(Tk / 64), H, B): dk and dv for 64 keys.
template <typename S, int HEAD>
__global__ void __launch_bounds__(kTensorCoreThreads, resident_blocks<float, tensor_core_dkdv_shared_bytes<HEAD>()>())
    attention_dkdv_tensor_core_kernel(AttentionOperand<const S> q, AttentionOperand<const S> k,
                                      AttentionOperand<const S> v, AttentionOperand<const S> dout,
                                      const float* logsumexp, const float* delta, AttentionOperand<S> dk,
                                      AttentionOperand<S> dv, AttentionSizes n, float scale, bool causal) {
  static_assert(sizeof(S) == kHalfBytes, "the tensor-core kernels take 16-bit storage");
  static_assert(float_bytes(kTensorCoreRows, HEAD) <= tensor_core_dkdv_shared_bytes<HEAD>(), "no room to stage");
  constexpr int QT = backward_tile<HEAD>(), HP = half_pitch(HEAD), PP = half_pitch(QT), FP = float_pitch(QT);
  S* k_tile = tensor_core_shared<S>();
  S* v_tile = k_tile + kTensorCoreRows * HP;
  S* q_tile = v_tile + kTensorCoreRows * HP;
  S* dout_tile = q_tile + QT * HP;
  S* p_tile = dout_tile + QT * HP;  // P^T: [key][query]
  S* ds_tile = p_tile + kTensorCoreRows * PP;
  float* s_scratch = reinterpret_cast<float*>(ds_tile + kTensorCoreRows * PP);
  float* dp_scratch = s_scratch + kTensorCoreRows * FP;
  float* lse_tile = dp_scratch + kTensorCoreRows * FP;
  float* delta_tile = lse_tile + QT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int b = blockIdx.z, h = blockIdx.y;
  const int first_key = blockIdx.x * kTensorCoreRows;
  const int key = first_key + 16 * warp + r;  // the lane's row
  const S* k_rows = k_tile + 16 * warp * HP;
  const S* v_rows = v_tile + 16 * warp * HP;
  S* p_rows = p_tile + 16 * warp * PP;
  S* ds_rows = ds_tile + 16 * warp * PP;
  float* s_rows = s_scratch + 16 * warp * FP;
  float* dp_rows = dp_scratch + 16 * warp * FP;
  const S* q_head = q.head(b, h);
  const S* dout_head = dout.head(b, h);
  const int64_t head_row = (static_cast<int64_t>(b) * n.heads + h) * n.queries;
  load_half_rows<kTensorCoreRows, HEAD>(k_tile, k.head(b, h), k.row_stride, first_key, n.keys, n.qk_dim);
  load_half_rows<kTensorCoreRows, HEAD>(v_tile, v.head(b, h), v.row_stride, first_key, n.keys, n.v_dim);

  Accumulator dk_acc[HEAD / 16], dv_acc[HEAD / 16];  // the warp's 16 keys
  clear_blocks(dk_acc);
  clear_blocks(dv_acc);
  // Causal: the query tiles before the first that sees first_key see none of these keys.
  for (int first_query = first_query_tile_seeing(first_key, QT, n, causal); first_query < n.queries;
       first_query += QT) {
    __syncthreads();  // every warp is done with the previous query-side tiles
    load_half_rows<QT, HEAD>(q_tile, q_head, q.row_stride, first_query, n.queries, n.qk_dim);
    load_half_rows<QT, HEAD>(dout_tile, dout_head, dout.row_stride, first_query, n.queries, n.v_dim);
    for (int c = threadIdx.x; c < QT; c += kTensorCoreThreads) {
      const bool inside = first_query + c < n.queries;
      lse_tile[c] = inside ? logsumexp[head_row + first_query + c] : 0.0f;
      delta_tile[c] = inside ? delta[head_row + first_query + c] : 0.0f;
    }
    __syncthreads();
    {
      Accumulator s[QT / 16], dp[QT / 16];  // [key][query]
      clear_blocks(s);
      clear_blocks(dp);
      warp_product<HEAD, wmma::col_major>(s, k_rows, HP, q_tile, HP, n.qk_dim, QT);
      warp_product<HEAD, wmma::col_major>(dp, v_rows, HP, dout_tile, HP, n.v_dim, QT);
      store_blocks(s_rows, FP, s);
      store_blocks(dp_rows, FP, dp);
    }
    __syncwarp();  // S^T and dP^T are in the scratch for every lane
#pragma unroll
    for (int i = 0; i < QT / 2; ++i) {
      const int c = lane_column<QT>(i, r, half), query = first_query + c;
      const bool seen = query < n.queries && sees(query, key, n, causal);
      const float p = seen ? math::exp(scale * s_rows[r * FP + c] - lse_tile[c]) : 0.0f;
      // Both rounded: tensor-core operands.
      p_rows[r * PP + c] = narrow_to<S>(p);
      ds_rows[r * PP + c] = narrow_to<S>(p * (dp_rows[r * FP + c] - delta_tile[c]));
    }
    __syncwarp();  // P^T and dS^T are in p_rows, ds_rows
    warp_product<QT, wmma::row_major>(dv_acc, p_rows, PP, dout_tile, HP, QT, n.v_dim);
    warp_product<QT, wmma::row_major>(dk_acc, ds_rows, PP, q_tile, HP, QT, n.qk_dim);
  }

  __syncthreads();  // every warp is done with the tiles: the start of shared memory stages dk, dv
  constexpr int SP = float_pitch(HEAD);
  float* staging = tensor_core_shared<float>() + 16 * warp * SP;
  store_blocks(staging, SP, dk_acc);
  __syncwarp();
  store_warp_rows<HEAD>(dk.head(b, h), dk.row_stride, first_key + 16 * warp, n.keys, n.qk_dim, staging, SP, scale);
  __syncwarp();  // every lane is done reading dk from the staging
  store_blocks(staging, SP, dv_acc);
  __syncwarp();
  store_warp_rows<HEAD>(dv.head(b, h), dv.row_stride, first_key + 16 * warp, n.keys, n.v_dim, staging, SP, 1.0f);
}

// grid (ceil(Tq / 64), H, B): dq for 64 queries.
template <typename S, int HEAD>
__global__ void __launch_bounds__(kTensorCoreThreads, resident_blocks<float, tensor_core_dq_shared_bytes<HEAD>()>())
    attention_dq_tensor_core_kernel(AttentionOperand<const S> q, AttentionOperand<const S> k,
                                    AttentionOperand<const S> v, AttentionOperand<const S> dout, const float* logsumexp,
                                    const float* delta, AttentionOperand<S> dq, AttentionSizes n, float scale,
                                    bool causal) {
  static_assert(sizeof(S) == kHalfBytes, "the tensor-core kernels take 16-bit storage");
  static_assert(float_bytes(kTensorCoreRows, HEAD) <= tensor_core_dq_shared_bytes<HEAD>(), "no room to stage");
  constexpr int KT = backward_tile<HEAD>(), HP = half_pitch(HEAD), DP = half_pitch(KT), FP = float_pitch(KT);
  S* q_tile = tensor_core_shared<S>();
  S* dout_tile = q_tile + kTensorCoreRows * HP;
  S* k_tile = dout_tile + kTensorCoreRows * HP;
  S* v_tile = k_tile + KT * HP;
  S* ds_tile = v_tile + KT * HP;
  float* s_scratch = reinterpret_cast<float*>(ds_tile + kTensorCoreRows * DP);
  float* dp_scratch = s_scratch + kTensorCoreRows * FP;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, half = lane % 2;
  const int b = blockIdx.z, h = blockIdx.y;
  const int first_query = blockIdx.x * kTensorCoreRows;
  const int query = first_query + 16 * warp + r;  // the lane's row
  const S* q_rows = q_tile + 16 * warp * HP;
  const S* dout_rows = dout_tile + 16 * warp * HP;
  S* ds_rows = ds_tile + 16 * warp * DP;
  float* s_rows = s_scratch + 16 * warp * FP;
  float* dp_rows = dp_scratch + 16 * warp * FP;
  const S* k_head = k.head(b, h);
  const S* v_head = v.head(b, h);
  load_half_rows<kTensorCoreRows, HEAD>(q_tile, q.head(b, h), q.row_stride, first_query, n.queries, n.qk_dim);
  load_half_rows<kTensorCoreRows, HEAD>(dout_tile, dout.head(b, h), dout.row_stride, first_query, n.queries, n.v_dim);
  const int64_t head_row = (static_cast<int64_t>(b) * n.heads + h) * n.queries;
  const bool inside = query < n.queries;
  const float row_lse = inside ? logsumexp[head_row + query] : 0.0f;
  const float row_delta = inside ? delta[head_row + query] : 0.0f;

  Accumulator dq_acc[HEAD / 16];  // the warp's 16 queries
  clear_blocks(dq_acc);
  const int key_end = keys_seen_by_tile(first_query, kTensorCoreRows, n, causal);
  for (int first_key = 0; first_key < key_end; first_key += KT) {
    __syncthreads();  // every warp is done with the previous k_tile, v_tile
    load_half_rows<KT, HEAD>(k_tile, k_head, k.row_stride, first_key, n.keys, n.qk_dim);
    load_half_rows<KT, HEAD>(v_tile, v_head, v.row_stride, first_key, n.keys, n.v_dim);
    __syncthreads();
    {
      Accumulator s[KT / 16], dp[KT / 16];  // [query][key]
      clear_blocks(s);
      clear_blocks(dp);
      warp_product<HEAD, wmma::col_major>(s, q_rows, HP, k_tile, HP, n.qk_dim, KT);
      warp_product<HEAD, wmma::col_major>(dp, dout_rows, HP, v_tile, HP, n.v_dim, KT);
      store_blocks(s_rows, FP, s);
      store_blocks(dp_rows, FP, dp);
    }
    __syncwarp();  // S and dP are in the scratch for every lane
#pragma unroll
    for (int i = 0; i < KT / 2; ++i) {
      const int c = lane_column<KT>(i, r, half), key = first_key + c;
      const bool seen = key < n.keys && sees(query, key, n, causal);
      const float p = seen ? math::exp(scale * s_rows[r * FP + c] - row_lse) : 0.0f;
      ds_rows[r * DP + c] = narrow_to<S>(p * (dp_rows[r * FP + c] - row_delta));  // rounded: a tensor-core operand
    }
    __syncwarp();  // dS is in ds_rows
    warp_product<KT, wmma::row_major>(dq_acc, ds_rows, DP, k_tile, HP, KT, n.qk_dim);
  }

  __syncthreads();  // every warp is done with the tiles: the start of shared memory stages dq
  constexpr int SP = float_pitch(HEAD);
  float* staging = tensor_core_shared<float>() + 16 * warp * SP;
  store_blocks(staging, SP, dq_acc);
  __syncwarp();
  store_warp_rows<HEAD>(dq.head(b, h), dq.row_stride, first_query + 16 * warp, n.queries, n.qk_dim, staging, SP, scale);
}

}  // namespace loom::cuda
