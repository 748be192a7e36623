// Fused scaled-dot-product attention kernels (FlashAttention-2's algorithm):
// the (Tq, Tk) score matrix lives only in registers and in shared memory.
//
// For one head, with s_ij = scale q_i . k_j (and -inf where masked):
//   forward:  out_i = sum_j softmax_j(s_i) v_j,  L_i = log sum_j exp(s_ij)
//   backward: P_ij = exp(s_ij - L_i), delta_i = dout_i . out_i,
//             dv_j = sum_i P_ij dout_i,  dS_ij = P_ij (dout_i . v_j - delta_i),
//             dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i
//
// A block of 16 x 16 threads owns a tile of rows (queries, or keys for dk/dv)
// and walks the tiles of the other side. Thread (ty, tx) holds an R x R
// piece of each score tile (R = micro_tile: 4 in float, 2 in double): rows
// ty R + i, consecutive, and columns tx + 16 j, 16 apart. The 16 threads of
// a row group are 16 consecutive lanes of one warp, so a row's max or sum is
// four shuffles. Of an output (rows x head dim) a thread holds the same R
// rows and 4 consecutive columns in every 64 (4 tx + 64 g).
//
//   forward  (queries): Q in shared memory; per key tile load K, V; scores;
//            online softmax (a running max rescales the running sum and the
//            output held in registers); P to shared memory; out += P V.
//   delta    a warp per row: delta_i = dout_i . out_i.
//   dk, dv   (keys): K, V in shared memory; per query tile load Q, dout,
//            L, delta; recompute P and dS; dv += P^T dout, dk += dS^T Q.
//   dq       (queries): Q, dout in shared memory; per key tile load K, V;
//            recompute P and dS; dq += dS K.
// Every output element is written by one thread: no atomics, so results
// are deterministic. The dk/dv and dq kernels each recompute the scores
// rather than share them through memory or atomics.
//   dk, dv, dq  (keys, float and double only): the dk/dv kernel that also
//            reads its dS^T tile transposed and adds dS K, the tile's
//            share of dq, into dq with atomics (FlashAttention-2's
//            backward, and PyTorch's): the
//            scores are computed once, but the order in which the key
//            tiles' shares meet varies from run to run, and with it dq's
//            last bits.
//
// Operands have any strides but a contiguous last dim; S is the storage type
// and T the compute type (float for 16-bit and float32), as in half.cuh:
// values are widened into shared memory and rounded once on store.
// Tiles live in shared memory as rows padded by 4 elements, so that the
// lanes of a 16-byte access that read rows r, r + 1, ... start 4 banks apart.
// Rows past the end and columns past the head dim are loaded as 0, so the
// tile products run without bounds; masked scores become -inf (P = 0).
//
// The kernels also compile as host C++ for tests/cuda/attention_emulated_test.cc:
// with LOOM_CUDA_EMULATION defined, tests/cuda/cuda_emulation.h (included
// first) provides threadIdx, __syncthreads, __shfl_xor_sync and a block's
// dynamic shared memory, and the kernels run in float only.
#pragma once

#include <cstdint>

#ifdef LOOM_CUDA_EMULATION
namespace loom::cuda {  // float as itself (cuda_emulation.h widens its emulated bfloat16)
template <typename S>
inline S widen(S x) {
  return x;
}
template <typename Out, typename T>
inline Out narrow_to(T x) {
  return static_cast<Out>(x);
}
}  // namespace loom::cuda
#else
#include "tensor/cuda/half.cuh"
#endif
#include "tensor/cuda/device_math.cuh"

namespace loom::cuda {

constexpr int kAttentionThreads = 256;                      // 16 row groups of 16 lanes
constexpr int kDeltaRowsPerBlock = kAttentionThreads / 32;  // a warp per row

// Each thread holds a micro_tile x micro_tile piece of a score tile: 4 x 4 in
// float (64 x 64 tiles); 2 x 2 in double (32 x 32), so that the tiles of a
// 128-wide head still fit in shared memory.
template <typename T>
constexpr int micro_tile() {
  return sizeof(T) == 8 ? 2 : 4;
}
template <typename T>
constexpr int attention_tile() {
  return 16 * micro_tile<T>();
}

// Row pitches in shared memory: head-dim rows (Q, K, V, dout) and score rows.
template <int HEAD>
constexpr int head_pitch() {
  return HEAD + 4;
}
template <typename T>
constexpr int score_pitch() {
  return attention_tile<T>() + 4;
}

// Dynamic shared memory of each kernel, in bytes. HEAD (64 or 128) bounds
// both head dims.
template <typename T, int HEAD>
constexpr int attention_forward_shared_bytes() {  // Q, K, V; P
  return (3 * head_pitch<HEAD>() + score_pitch<T>()) * attention_tile<T>() * static_cast<int>(sizeof(T));
}
template <typename T, int HEAD>
constexpr int attention_dkdv_shared_bytes() {  // K, V, Q, dout; P, dS; L, delta
  return (4 * head_pitch<HEAD>() + 2 * score_pitch<T>() + 2) * attention_tile<T>() * static_cast<int>(sizeof(T));
}
template <typename T, int HEAD>
constexpr int attention_dq_shared_bytes() {  // Q, dout, K, V; dS
  return (4 * head_pitch<HEAD>() + score_pitch<T>()) * attention_tile<T>() * static_cast<int>(sizeof(T));
}

// The blocks per multiprocessor a kernel's registers must leave room for
// (__launch_bounds__): as many as its shared memory lets run at once (sm_90:
// 228 KB, 1 KB of it reserved per block), but at most 2 in double, whose
// register tiles are twice as large.
template <typename T, int SHARED_BYTES>
constexpr int resident_blocks() {
  static_assert(SHARED_BYTES <= 227 * 1024, "the tiles exceed a block's shared memory on sm_90");
  constexpr int fit = 228 * 1024 / (SHARED_BYTES + 1024);
  return sizeof(T) == 8 && fit > 2 ? 2 : fit;
}

// One of attention's (B, H, rows, width) operands: its data and its element
// strides along B, H and rows (the last dim is contiguous).
template <typename S>
struct AttentionOperand {
  S* data;
  int64_t batch_stride, head_stride, row_stride;

  __device__ S* head(int b, int h) const { return data + b * batch_stride + h * head_stride; }
};

struct AttentionSizes {
  int heads;    // H (B is gridDim.z)
  int queries;  // Tq
  int keys;     // Tk
  int qk_dim;   // D
  int v_dim;    // Dv
};

// Four consecutive elements of a shared-memory row, read in one 16-byte
// access (two for double).
template <typename T>
struct alignas(16) Quad {
  T v[4];
};

template <typename T>
__device__ __forceinline__ Quad<T> load_quad(const T* p) {
  return *reinterpret_cast<const Quad<T>*>(p);
}

template <typename T>
__device__ __forceinline__ T* dynamic_shared() {
#ifdef LOOM_CUDA_EMULATION
  return reinterpret_cast<T*>(emulated_dynamic_shared());
#else
  extern __shared__ __align__(16) unsigned char attention_shared[];
  return reinterpret_cast<T*>(attention_shared);
#endif
}

template <typename T>
__device__ __forceinline__ T larger(T a, T b) {
  return a > b ? a : b;
}

// Reductions over the 16 lanes of a row group.
template <typename T>
__device__ __forceinline__ T row_group_max(T x) {
#pragma unroll
  for (int mask = 8; mask > 0; mask >>= 1) x = larger(x, __shfl_xor_sync(0xffffffffu, x, mask));
  return x;
}
template <typename T>
__device__ __forceinline__ T row_group_sum(T x) {
#pragma unroll
  for (int mask = 8; mask > 0; mask >>= 1) x += __shfl_xor_sync(0xffffffffu, x, mask);
  return x;
}

// Copies rows [first, first + ROWS) of one head's (rows, width) matrix into
// a shared tile, widened to T, with 0 past `rows` and past `width`.
template <int ROWS, int HEAD, typename S, typename T>
__device__ __forceinline__ void load_rows(T* tile, const S* matrix, int64_t row_stride, int first, int rows,
                                          int width) {
  for (int e = threadIdx.x; e < ROWS * HEAD; e += kAttentionThreads) {
    const int r = e / HEAD, c = e % HEAD;
    const int row = first + r;
    tile[r * head_pitch<HEAD>() + c] = row < rows && c < width ? widen(matrix[row * row_stride + c]) : T(0);
  }
}

// A thread's piece of a score tile, and its rows x head-dim columns of an
// output, in registers.
template <typename T>
using ScorePiece = T[micro_tile<T>()][micro_tile<T>()];
template <typename T, int HEAD>
using OutputPiece = T[micro_tile<T>()][HEAD / 16];

// acc[i][j] = a_i . b_j over the first `depth` columns, for R consecutive
// rows a_i of the tile at `a` and R rows b_j 16 apart of the tile at `b`.
template <int HEAD, typename T>
__device__ __forceinline__ void dot_tile(const T* a, const T* b, int depth, ScorePiece<T>& acc) {
  constexpr int R = micro_tile<T>(), pitch = head_pitch<HEAD>();
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < R; ++j) acc[i][j] = 0;
#pragma unroll
  for (int d = 0; d < HEAD; d += 4) {
    if (d >= depth) break;  // the columns up to the next multiple of 4 are 0
    Quad<T> x[R], y[R];
#pragma unroll
    for (int i = 0; i < R; ++i) x[i] = load_quad(a + i * pitch + d);
#pragma unroll
    for (int j = 0; j < R; ++j) y[j] = load_quad(b + 16 * j * pitch + d);
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
      for (int j = 0; j < R; ++j)
#pragma unroll
        for (int u = 0; u < 4; ++u) acc[i][j] += x[i].v[u] * y[j].v[u];
  }
}

// acc[i][4 g + c] += sum_k w[i][k] m[k][64 g + c]: the thread's R rows of a
// score tile (`w` at its first row) times a head-dim tile (`m` at the
// thread's first column, 4 tx).
template <int HEAD, typename T>
__device__ __forceinline__ void accumulate_product(const T* w, const T* m, OutputPiece<T, HEAD>& acc) {
  constexpr int R = micro_tile<T>(), pitch = head_pitch<HEAD>(), w_pitch = score_pitch<T>();
#pragma unroll
  for (int k = 0; k < attention_tile<T>(); k += 4) {
    Quad<T> weights[R];
#pragma unroll
    for (int i = 0; i < R; ++i) weights[i] = load_quad(w + i * w_pitch + k);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int g = 0; g < HEAD / 64; ++g) {
        const Quad<T> x = load_quad(m + (k + u) * pitch + 64 * g);
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[i][4 * g + c] += weights[i].v[u] * x.v[c];
      }
    }
  }
}

// The same product with the score tile stored transposed, w_t[k][row] (the
// thread's first row at `w_t`): the dk/dv kernel's dS^T read as dS for dq,
// with no second copy in shared memory.
template <int HEAD, typename T>
__device__ __forceinline__ void accumulate_transposed_product(const T* w_t, const T* m, OutputPiece<T, HEAD>& acc) {
  constexpr int R = micro_tile<T>(), pitch = head_pitch<HEAD>(), w_pitch = score_pitch<T>();
#pragma unroll 4
  for (int k = 0; k < attention_tile<T>(); ++k) {
    T weights[R];  // the thread's rows' weights of key k: R consecutive elements
    if constexpr (R == 4) {
      const Quad<T> column = load_quad(w_t + k * w_pitch);
#pragma unroll
      for (int i = 0; i < R; ++i) weights[i] = column.v[i];
    } else {
#pragma unroll
      for (int i = 0; i < R; ++i) weights[i] = w_t[k * w_pitch + i];
    }
#pragma unroll
    for (int g = 0; g < HEAD / 64; ++g) {
      const Quad<T> x = load_quad(m + k * pitch + 64 * g);
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][4 * g + c] += weights[i] * x.v[c];
    }
  }
}

// visit(row, col, value) for each element of the thread's piece of an
// output (its rows from `first_row`) inside `rows` and `width`.
template <int HEAD, typename T, typename Visit>
__device__ __forceinline__ void for_each_element(int first_row, int rows, int width, const OutputPiece<T, HEAD>& acc,
                                                 Visit&& visit) {
  constexpr int R = micro_tile<T>();
  const int tx = threadIdx.x % 16;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const int row = first_row + i;
    if (row >= rows) break;
#pragma unroll
    for (int g = 0; g < HEAD / 64; ++g)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int col = 64 * g + 4 * tx + c;
        if (col < width) visit(row, col, acc[i][4 * g + c]);
      }
  }
}

// Stores the thread's piece of an output, times `factor`, rounded once;
// rows past `rows` and columns past `width` are not written.
template <int HEAD, typename S, typename T>
__device__ __forceinline__ void store_rows(S* matrix, int64_t row_stride, int first_row, int rows, int width, T factor,
                                           const OutputPiece<T, HEAD>& acc) {
  for_each_element<HEAD>(first_row, rows, width, acc,
                         [&](int row, int col, T x) { matrix[row * row_stride + col] = narrow_to<S>(x * factor); });
}

// Adds the thread's piece, times `factor`, into an output with atomics:
// other blocks add their shares of the same rows.
template <int HEAD, typename T>
__device__ __forceinline__ void add_rows_atomically(T* matrix, int64_t row_stride, int first_row, int rows, int width,
                                                    T factor, const OutputPiece<T, HEAD>& acc) {
  for_each_element<HEAD>(first_row, rows, width, acc,
                         [&](int row, int col, T x) { atomicAdd(matrix + row * row_stride + col, x * factor); });
}

// The causal mask with Tq <= Tk: the queries are the last Tq of the keys'
// positions (FlashAttention's bottom-right alignment), so query i sees the
// keys j <= i + (Tk - Tq); with Tq == Tk, the keys up to its own.
__device__ __forceinline__ bool sees(int query, int key, const AttentionSizes& n, bool causal) {
  return !causal || key <= query + (n.keys - n.queries);
}

// The keys [0, end) that queries [first_query, first_query + tile) attend
// to: all of them, or with the causal mask those the tile's last query sees.
__device__ __forceinline__ int keys_seen_by_tile(int first_query, int tile, const AttentionSizes& n, bool causal) {
  const int last_query = (first_query + tile < n.queries ? first_query + tile : n.queries) - 1;
  const int end = last_query + 1 + (n.keys - n.queries);
  return causal && end < n.keys ? end : n.keys;
}

// The first query tile (of `tile` queries, tiles from query 0) with a query
// that sees key `first_key`: 0, or with the causal mask the tile holding
// query first_key - (Tk - Tq).
__device__ __forceinline__ int first_query_tile_seeing(int first_key, int tile, const AttentionSizes& n, bool causal) {
  const int query = first_key - (n.keys - n.queries);
  return causal && query > 0 ? query / tile * tile : 0;
}

template <int HEAD, typename T>
__device__ __forceinline__ void clear(OutputPiece<T, HEAD>& acc) {
#pragma unroll
  for (int i = 0; i < micro_tile<T>(); ++i)
#pragma unroll
    for (int c = 0; c < HEAD / 16; ++c) acc[i][c] = 0;
}

// grid (ceil(Tq / tile), H, B). out and logsumexp (B, H, Tq) are written.
template <typename S, typename T, int HEAD>
__global__ void __launch_bounds__(kAttentionThreads, resident_blocks<T, attention_forward_shared_bytes<T, HEAD>()>())
    attention_forward_kernel(AttentionOperand<const S> q, AttentionOperand<const S> k, AttentionOperand<const S> v,
                             AttentionOperand<S> out, T* logsumexp, AttentionSizes n, T scale, bool causal) {
  constexpr int R = micro_tile<T>(), TILE = attention_tile<T>();
  constexpr int HP = head_pitch<HEAD>(), SP = score_pitch<T>();
  T* q_tile = dynamic_shared<T>();
  T* k_tile = q_tile + TILE * HP;
  T* v_tile = k_tile + TILE * HP;
  T* p_tile = v_tile + TILE * HP;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int b = blockIdx.z, h = blockIdx.y;
  const int first_query = blockIdx.x * TILE;
  const int first_row = first_query + ty * R;  // the thread's rows: first_row + i
  const S* k_head = k.head(b, h);
  const S* v_head = v.head(b, h);
  load_rows<TILE, HEAD>(q_tile, q.head(b, h), q.row_stride, first_query, n.queries, n.qk_dim);

  T row_max[R], row_sum[R];
  OutputPiece<T, HEAD> acc;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    row_max[i] = -math::infinity<T>();
    row_sum[i] = 0;  // this thread's columns only, until the end
  }
  clear<HEAD>(acc);
  // Tile 0 holds key 0, seen by every row (Tq <= Tk when causal), so each
  // running max is finite from the first tile on.
  const int key_end = keys_seen_by_tile(first_query, TILE, n, causal);
  for (int first_key = 0; first_key < key_end; first_key += TILE) {
    __syncthreads();  // the previous tile's readers are done with k_tile, v_tile, p_tile
    load_rows<TILE, HEAD>(k_tile, k_head, k.row_stride, first_key, n.keys, n.qk_dim);
    load_rows<TILE, HEAD>(v_tile, v_head, v.row_stride, first_key, n.keys, n.v_dim);
    __syncthreads();
    ScorePiece<T> s;
    dot_tile<HEAD>(q_tile + ty * R * HP, k_tile + tx * HP, n.qk_dim, s);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int query = first_row + i;
      T tile_max = -math::infinity<T>();
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int key = first_key + tx + 16 * j;
        const bool seen = key < n.keys && sees(query, key, n, causal);
        s[i][j] = seen ? scale * s[i][j] : -math::infinity<T>();
        tile_max = larger(tile_max, s[i][j]);
      }
      const T new_max = larger(row_max[i], row_group_max(tile_max));
      const T rescale = math::exp(row_max[i] - new_max);  // 0 on the first tile
      row_max[i] = new_max;
      row_sum[i] *= rescale;
#pragma unroll
      for (int c = 0; c < HEAD / 16; ++c) acc[i][c] *= rescale;
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const T p = math::exp(s[i][j] - new_max);  // masked: exp(-inf) = 0
        row_sum[i] += p;
        p_tile[(ty * R + i) * SP + tx + 16 * j] = p;
      }
    }
    __syncthreads();
    accumulate_product<HEAD>(p_tile + ty * R * SP, v_tile + 4 * tx, acc);
  }

  T row_logsumexp[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const T sum = row_group_sum(row_sum[i]);
#pragma unroll
    for (int c = 0; c < HEAD / 16; ++c) acc[i][c] /= sum;
    row_logsumexp[i] = row_max[i] + math::log(sum);
  }
  store_rows<HEAD>(out.head(b, h), out.row_stride, first_row, n.queries, n.v_dim, T(1), acc);
  T* head_logsumexp = logsumexp + (static_cast<int64_t>(b) * n.heads + h) * n.queries;
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (tx == 0 && first_row + i < n.queries) head_logsumexp[first_row + i] = row_logsumexp[i];
}

// grid (ceil(Tq / kDeltaRowsPerBlock), H, B): delta (B, H, Tq) = rowwise
// dout . out. With dq_to_zero's data set (the backward that adds dq's
// shares with atomics), the warp also zeroes the row's dq: one launch and
// one pass fewer than a fill of dq, which in a GPT is a strided view (a
// third of each row of the qkv projection's gradient).
template <typename S, typename T>
__global__ void __launch_bounds__(kAttentionThreads)
    attention_delta_kernel(AttentionOperand<const S> out, AttentionOperand<const S> dout, T* delta, AttentionSizes n,
                           AttentionOperand<T> dq_to_zero) {
  const int b = blockIdx.z, h = blockIdx.y;
  const int row = blockIdx.x * kDeltaRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= n.queries) return;  // whole warps
  if (dq_to_zero.data != nullptr) {
    T* dq_row = dq_to_zero.head(b, h) + row * dq_to_zero.row_stride;
    for (int c = lane; c < n.qk_dim; c += 32) dq_row[c] = T(0);
  }
  const S* out_row = out.head(b, h) + row * out.row_stride;
  const S* dout_row = dout.head(b, h) + row * dout.row_stride;
  T sum = 0;
  for (int c = lane; c < n.v_dim; c += 32) sum += widen(out_row[c]) * widen(dout_row[c]);
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, mask);
  if (lane == 0) delta[(static_cast<int64_t>(b) * n.heads + h) * n.queries + row] = sum;
}

// dk and dv for a tile of keys (block blockIdx.x); with ATOMIC_DQ also the
// tile's share of dq, added into dq_sum (zero before the first block).
template <typename S, typename T, int HEAD, bool ATOMIC_DQ>
__device__ __forceinline__ void dkdv_for_key_tile(AttentionOperand<const S> q, AttentionOperand<const S> k,
                                                  AttentionOperand<const S> v, AttentionOperand<const S> dout,
                                                  const T* logsumexp, const T* delta, AttentionOperand<S> dk,
                                                  AttentionOperand<S> dv, AttentionOperand<T> dq_sum, AttentionSizes n,
                                                  T scale, bool causal) {
  constexpr int R = micro_tile<T>(), TILE = attention_tile<T>();
  constexpr int HP = head_pitch<HEAD>(), SP = score_pitch<T>();
  T* k_tile = dynamic_shared<T>();
  T* v_tile = k_tile + TILE * HP;
  T* q_tile = v_tile + TILE * HP;
  T* dout_tile = q_tile + TILE * HP;
  T* p_tile = dout_tile + TILE * HP;  // P^T: [key][query]
  T* ds_tile = p_tile + TILE * SP;    // dS^T
  T* lse_tile = ds_tile + TILE * SP;
  T* delta_tile = lse_tile + TILE;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int b = blockIdx.z, h = blockIdx.y;
  const int first_key = blockIdx.x * TILE;
  const int first_row = first_key + ty * R;  // the thread's keys: first_row + i
  const S* q_head = q.head(b, h);
  const S* dout_head = dout.head(b, h);
  const int64_t head_row = (static_cast<int64_t>(b) * n.heads + h) * n.queries;
  load_rows<TILE, HEAD>(k_tile, k.head(b, h), k.row_stride, first_key, n.keys, n.qk_dim);
  load_rows<TILE, HEAD>(v_tile, v.head(b, h), v.row_stride, first_key, n.keys, n.v_dim);

  OutputPiece<T, HEAD> dk_acc, dv_acc;
  clear<HEAD>(dk_acc);
  clear<HEAD>(dv_acc);
  // Causal: the query tiles before the first that sees first_key see none of these keys.
  for (int first_query = first_query_tile_seeing(first_key, TILE, n, causal); first_query < n.queries;
       first_query += TILE) {
    __syncthreads();  // the previous tile's readers are done with the query-side tiles
    load_rows<TILE, HEAD>(q_tile, q_head, q.row_stride, first_query, n.queries, n.qk_dim);
    load_rows<TILE, HEAD>(dout_tile, dout_head, dout.row_stride, first_query, n.queries, n.v_dim);
    for (int r = threadIdx.x; r < TILE; r += kAttentionThreads) {
      const bool inside = first_query + r < n.queries;
      lse_tile[r] = inside ? logsumexp[head_row + first_query + r] : T(0);
      delta_tile[r] = inside ? delta[head_row + first_query + r] : T(0);
    }
    __syncthreads();
    ScorePiece<T> s, dp;  // [key i][query j]; dp becomes dS
    dot_tile<HEAD>(k_tile + ty * R * HP, q_tile + tx * HP, n.qk_dim, s);
    dot_tile<HEAD>(v_tile + ty * R * HP, dout_tile + tx * HP, n.v_dim, dp);
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int key = first_row + i, column = tx + 16 * j, query = first_query + column;
        const bool seen = query < n.queries && sees(query, key, n, causal);
        const T p = seen ? math::exp(scale * s[i][j] - lse_tile[column]) : T(0);
        dp[i][j] = p * (dp[i][j] - delta_tile[column]);
        p_tile[(ty * R + i) * SP + column] = p;
        ds_tile[(ty * R + i) * SP + column] = dp[i][j];
      }
    __syncthreads();
    accumulate_product<HEAD>(p_tile + ty * R * SP, dout_tile + 4 * tx, dv_acc);
    accumulate_product<HEAD>(ds_tile + ty * R * SP, q_tile + 4 * tx, dk_acc);
    if constexpr (ATOMIC_DQ) {  // dq's share: dS (dS^T read transposed) times the key tile
      OutputPiece<T, HEAD> dq_share;
      clear<HEAD>(dq_share);
      accumulate_transposed_product<HEAD>(ds_tile + ty * R, k_tile + 4 * tx, dq_share);
      add_rows_atomically<HEAD>(dq_sum.head(b, h), dq_sum.row_stride, first_query + ty * R, n.queries, n.qk_dim, scale,
                                dq_share);
    }
  }
  store_rows<HEAD>(dk.head(b, h), dk.row_stride, first_row, n.keys, n.qk_dim, scale, dk_acc);
  store_rows<HEAD>(dv.head(b, h), dv.row_stride, first_row, n.keys, n.v_dim, T(1), dv_acc);
}

// grid (ceil(Tk / tile), H, B): dk and dv for a tile of keys.
template <typename S, typename T, int HEAD>
__global__ void __launch_bounds__(kAttentionThreads, resident_blocks<T, attention_dkdv_shared_bytes<T, HEAD>()>())
    attention_dkdv_kernel(AttentionOperand<const S> q, AttentionOperand<const S> k, AttentionOperand<const S> v,
                          AttentionOperand<const S> dout, const T* logsumexp, const T* delta, AttentionOperand<S> dk,
                          AttentionOperand<S> dv, AttentionSizes n, T scale, bool causal) {
  dkdv_for_key_tile<S, T, HEAD, false>(q, k, v, dout, logsumexp, delta, dk, dv, AttentionOperand<T>{}, n, scale,
                                       causal);
}

// grid (ceil(Tk / tile), H, B): dk and dv for a tile of keys, and its share
// of dq added into dq (zero before the launch) with atomics. S is T: float
// or double.
template <typename T, int HEAD>
__global__ void __launch_bounds__(kAttentionThreads, resident_blocks<T, attention_dkdv_shared_bytes<T, HEAD>()>())
    attention_dkdv_dq_kernel(AttentionOperand<const T> q, AttentionOperand<const T> k, AttentionOperand<const T> v,
                             AttentionOperand<const T> dout, const T* logsumexp, const T* delta, AttentionOperand<T> dk,
                             AttentionOperand<T> dv, AttentionOperand<T> dq, AttentionSizes n, T scale, bool causal) {
  dkdv_for_key_tile<T, T, HEAD, true>(q, k, v, dout, logsumexp, delta, dk, dv, dq, n, scale, causal);
}

// grid (ceil(Tq / tile), H, B): dq for a tile of queries.
template <typename S, typename T, int HEAD>
__global__ void __launch_bounds__(kAttentionThreads, resident_blocks<T, attention_dq_shared_bytes<T, HEAD>()>())
    attention_dq_kernel(AttentionOperand<const S> q, AttentionOperand<const S> k, AttentionOperand<const S> v,
                        AttentionOperand<const S> dout, const T* logsumexp, const T* delta, AttentionOperand<S> dq,
                        AttentionSizes n, T scale, bool causal) {
  constexpr int R = micro_tile<T>(), TILE = attention_tile<T>();
  constexpr int HP = head_pitch<HEAD>(), SP = score_pitch<T>();
  T* q_tile = dynamic_shared<T>();
  T* dout_tile = q_tile + TILE * HP;
  T* k_tile = dout_tile + TILE * HP;
  T* v_tile = k_tile + TILE * HP;
  T* ds_tile = v_tile + TILE * HP;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int b = blockIdx.z, h = blockIdx.y;
  const int first_query = blockIdx.x * TILE;
  const int first_row = first_query + ty * R;
  const S* k_head = k.head(b, h);
  const S* v_head = v.head(b, h);
  load_rows<TILE, HEAD>(q_tile, q.head(b, h), q.row_stride, first_query, n.queries, n.qk_dim);
  load_rows<TILE, HEAD>(dout_tile, dout.head(b, h), dout.row_stride, first_query, n.queries, n.v_dim);
  const int64_t head_row = (static_cast<int64_t>(b) * n.heads + h) * n.queries;
  T row_lse[R], row_delta[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const bool inside = first_row + i < n.queries;
    row_lse[i] = inside ? logsumexp[head_row + first_row + i] : T(0);
    row_delta[i] = inside ? delta[head_row + first_row + i] : T(0);
  }

  OutputPiece<T, HEAD> dq_acc;
  clear<HEAD>(dq_acc);
  const int key_end = keys_seen_by_tile(first_query, TILE, n, causal);
  for (int first_key = 0; first_key < key_end; first_key += TILE) {
    __syncthreads();  // the previous tile's readers are done with k_tile, v_tile, ds_tile
    load_rows<TILE, HEAD>(k_tile, k_head, k.row_stride, first_key, n.keys, n.qk_dim);
    load_rows<TILE, HEAD>(v_tile, v_head, v.row_stride, first_key, n.keys, n.v_dim);
    __syncthreads();
    ScorePiece<T> s, dp;  // [query i][key j]
    dot_tile<HEAD>(q_tile + ty * R * HP, k_tile + tx * HP, n.qk_dim, s);
    dot_tile<HEAD>(dout_tile + ty * R * HP, v_tile + tx * HP, n.v_dim, dp);
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
      for (int j = 0; j < R; ++j) {
        const int query = first_row + i, key = first_key + tx + 16 * j;
        const bool seen = key < n.keys && sees(query, key, n, causal);
        const T p = seen ? math::exp(scale * s[i][j] - row_lse[i]) : T(0);
        ds_tile[(ty * R + i) * SP + tx + 16 * j] = p * (dp[i][j] - row_delta[i]);
      }
    __syncthreads();
    accumulate_product<HEAD>(ds_tile + ty * R * SP, k_tile + 4 * tx, dq_acc);
  }
  store_rows<HEAD>(dq.head(b, h), dq.row_stride, first_row, n.queries, n.qk_dim, scale, dq_acc);
}

}  // namespace loom::cuda
