// The CUDA attention kernels run on the CPU under tests/cuda/cuda_emulation.h
// and are compared with a naive double-precision attention: forward (out,
// logsumexp) and backward (dq, dk, dv), causal or not, with sequences that
// end mid-tile, head dims that are not multiples of 4 (or 16), and heads
// interleaved in memory as a GPT lays them out. The SIMT kernels
// (tensor/cuda/attention_kernels.cuh) run in float, their backward both ways
// (dq by its own kernel, or added by the dk/dv kernel with atomics); the tensor-core kernels
// (tensor/cuda/attention_tensor_core.cuh) in bfloat16 storage, against the
// reference computed from the same bfloat16 inputs. Needs no GPU.

// The emulator first: it defines what the kernels use of CUDA.
// clang-format off
#define LOOM_CUDA_EMULATION
#include "tests/cuda/cuda_emulation.h"
#include "tensor/cuda/attention_kernels.cuh"
#include "tensor/cuda/attention_tensor_core.cuh"
// clang-format on

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace loom::cuda {
namespace {

using BFloat16 = __nv_bfloat16;  // the emulator's

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// An element may be off by `relative` times the largest of |expected|,
// `floor` times its operand's largest |expected|, and 1e-3.
struct Tolerance {
  double relative, floor;
};
// Float sums, some with cancellation, against double ones (seen: under
// 1e-5): the float kernels' outputs, and logsumexp on both paths (the
// tensor cores' scores are exact products of bfloat16 summed in float).
constexpr Tolerance kFloatTolerance{1e-4, 0.1};
// The tensor cores' out, dq, dk, dv: P and dS rounded to bfloat16 (2^-9
// relative) before their products, and the outputs rounded to bfloat16
// (seen: under 1e-2). The same kernels with float operands agree with the
// reference to 1e-5: the rest is rounding.
constexpr Tolerance kBFloat16Tolerance{2e-2, 0.5};

struct Case {
  int batch, heads, queries, keys, qk_dim, v_dim;
  float scale;
  bool causal;
};

// A (B, H, rows, width) view of a Buffer of E (float or bfloat16).
template <typename E>
struct Operand {
  E* data;
  int64_t batch_stride, head_stride, row_stride;
  int batch, heads, rows, width;

  E& at(int b, int h, int r, int c) const { return data[b * batch_stride + h * head_stride + r * row_stride + c]; }
  double value(int b, int h, int r, int c) const { return static_cast<float>(at(b, h, r, c)); }
  template <typename S>
  AttentionOperand<S> view() const {
    return {data, batch_stride, head_stride, row_stride};
  }
};

// Memory for `slots` (B, H, rows, width) operands laid out as (B, rows,
// slots, H, pitch), as a GPT's q, k, v projection lays out heads (3 slots
// when fused), between guard bands. Every element starts as NaN: a kernel
// that reads outside its operands, or leaves an output element unwritten,
// gets or leaves a NaN that the comparisons catch.
template <typename E>
class Buffer {
 public:
  Buffer(int batch, int heads, int rows, int pitch, int slots = 1)
      : batch_(batch),
        heads_(heads),
        rows_(rows),
        pitch_(pitch),
        slots_(slots),
        memory_(2 * kGuard + static_cast<size_t>(batch) * rows * slots * heads * pitch, E(kNaN)) {}

  Operand<E> operand(int width, int slot = 0) {
    const int64_t row_stride = int64_t{slots_} * heads_ * pitch_;
    E* first = memory_.data() + kGuard + slot * heads_ * pitch_;
    return {first, rows_ * row_stride, pitch_, row_stride, batch_, heads_, rows_, width};
  }

  // Whether every element outside `o`'s is still the NaN it started as.
  bool untouched_outside(const Operand<E>& o) const {
    std::vector<bool> inside(memory_.size(), false);
    for (int b = 0; b < o.batch; ++b)
      for (int h = 0; h < o.heads; ++h)
        for (int r = 0; r < o.rows; ++r)
          for (int c = 0; c < o.width; ++c) inside[&o.at(b, h, r, c) - memory_.data()] = true;
    const E nan(kNaN);
    for (size_t i = 0; i < memory_.size(); ++i)
      if (!inside[i] && std::memcmp(&memory_[i], &nan, sizeof(E)) != 0) return false;
    return true;
  }

 private:
  static constexpr int kGuard = 64;  // elements: 16-byte aligned for both types
  int batch_, heads_, rows_, pitch_, slots_;
  std::vector<E> memory_;
};

// Uniform in [-1, 1], rounded to E.
template <typename E>
void randomize(const Operand<E>& o, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int b = 0; b < o.batch; ++b)
    for (int h = 0; h < o.heads; ++h)
      for (int r = 0; r < o.rows; ++r)
        for (int c = 0; c < o.width; ++c) o.at(b, h, r, c) = E(uniform(rng));
}

// An operand's values in double, (B, H, rows, width) contiguous.
using Values = std::vector<double>;

template <typename E>
Values values_of(const Operand<E>& o) {
  Values v;
  for (int b = 0; b < o.batch; ++b)
    for (int h = 0; h < o.heads; ++h)
      for (int r = 0; r < o.rows; ++r)
        for (int c = 0; c < o.width; ++c) v.push_back(o.value(b, h, r, c));
  return v;
}

template <typename E>
double dot(const Operand<E>& x, int b, int h, int i, const Operand<E>& y, int j) {
  double sum = 0;
  for (int c = 0; c < x.width; ++c) sum += x.value(b, h, i, c) * y.value(b, h, j, c);
  return sum;
}

struct Expected {
  Values out, logsumexp, dq, dk, dv;
};

// Attention as the formulas say it, one score at a time, in double, from
// the operands' values (already rounded to E).
template <typename E>
Expected naive_attention(const Case& t, const Operand<E>& q, const Operand<E>& k, const Operand<E>& v,
                         const Operand<E>& dout) {
  Expected e;
  e.out.assign(size_t{1} * t.batch * t.heads * t.queries * t.v_dim, 0);
  e.logsumexp.assign(size_t{1} * t.batch * t.heads * t.queries, 0);
  e.dq.assign(size_t{1} * t.batch * t.heads * t.queries * t.qk_dim, 0);
  e.dk.assign(size_t{1} * t.batch * t.heads * t.keys * t.qk_dim, 0);
  e.dv.assign(size_t{1} * t.batch * t.heads * t.keys * t.v_dim, 0);
  for (int b = 0; b < t.batch; ++b)
    for (int h = 0; h < t.heads; ++h) {
      const size_t bh = size_t{1} * b * t.heads + h;
      for (int i = 0; i < t.queries; ++i) {
        // Causal: the queries are the last Tq of the keys' positions (Tq <= Tk).
        const int seen = t.causal ? i + 1 + (t.keys - t.queries) : t.keys;
        std::vector<double> p(seen);
        double max = -INFINITY;
        for (int j = 0; j < seen; ++j) {
          p[j] = t.scale * dot(q, b, h, i, k, j);
          max = std::max(max, p[j]);
        }
        double sum = 0;
        for (int j = 0; j < seen; ++j) sum += std::exp(p[j] - max);
        for (int j = 0; j < seen; ++j) p[j] = std::exp(p[j] - max) / sum;
        e.logsumexp[bh * t.queries + i] = max + std::log(sum);
        double* out = &e.out[(bh * t.queries + i) * t.v_dim];
        for (int j = 0; j < seen; ++j)
          for (int c = 0; c < t.v_dim; ++c) out[c] += p[j] * v.value(b, h, j, c);

        double delta = 0;
        for (int c = 0; c < t.v_dim; ++c) delta += dout.value(b, h, i, c) * out[c];
        for (int j = 0; j < seen; ++j) {
          const double ds = p[j] * (dot(dout, b, h, i, v, j) - delta);
          for (int c = 0; c < t.v_dim; ++c) e.dv[(bh * t.keys + j) * t.v_dim + c] += p[j] * dout.value(b, h, i, c);
          for (int c = 0; c < t.qk_dim; ++c) {
            e.dq[(bh * t.queries + i) * t.qk_dim + c] += t.scale * ds * k.value(b, h, j, c);
            e.dk[(bh * t.keys + j) * t.qk_dim + c] += t.scale * ds * q.value(b, h, i, c);
          }
        }
      }
    }
  return e;
}

void expect_close(const Values& actual, const Values& expected, const Tolerance& tolerance, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest = 0;
  for (double x : expected) largest = std::max(largest, std::abs(x));
  int reported = 0;
  for (size_t i = 0; i < actual.size() && reported < 5; ++i) {
    const double allowed = tolerance.relative * std::max({std::abs(expected[i]), tolerance.floor * largest, 1e-3});
    if (!(std::abs(actual[i] - expected[i]) <= allowed)) {  // NaN fails too
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", expected " << expected[i];
      ++reported;
    }
  }
}

// The kernels' outputs, in buffers of the given row pitch slack (0: packed);
// logsumexp and delta in float.
template <typename E>
struct Outputs {
  Outputs(const Case& t, int slack)
      : out_memory(t.batch, t.heads, t.queries, t.v_dim + slack),
        dq_memory(t.batch, t.heads, t.queries, t.qk_dim + slack),
        dk_memory(t.batch, t.heads, t.keys, t.qk_dim + slack),
        dv_memory(t.batch, t.heads, t.keys, t.v_dim + slack),
        out(out_memory.operand(t.v_dim)),
        dq(dq_memory.operand(t.qk_dim)),
        dk(dk_memory.operand(t.qk_dim)),
        dv(dv_memory.operand(t.v_dim)),
        logsumexp_memory(2 * kGuard + size_t{1} * t.batch * t.heads * t.queries, kNaN),
        delta(size_t{1} * t.batch * t.heads * t.queries, kNaN) {}

  float* logsumexp() { return logsumexp_memory.data() + kGuard; }
  Values logsumexp_values() const { return Values(logsumexp_memory.begin() + kGuard, logsumexp_memory.end() - kGuard); }
  bool logsumexp_guards_untouched() const {
    for (size_t i = 0; i < logsumexp_memory.size(); ++i)
      if ((i < kGuard || i >= logsumexp_memory.size() - kGuard) && !std::isnan(logsumexp_memory[i])) return false;
    return true;
  }

  static constexpr size_t kGuard = 64;
  Buffer<E> out_memory, dq_memory, dk_memory, dv_memory;
  Operand<E> out, dq, dk, dv;
  std::vector<float> logsumexp_memory, delta;
};

unsigned blocks(int rows, int per_block) { return static_cast<unsigned>((rows + per_block - 1) / per_block); }

// How the backward computes dq: its own kernel, or shares added by the
// dk/dv kernel with atomics (float only).
enum class Backward { kSeparateDq, kAtomicDq };

template <typename E>
std::vector<Backward> backwards_of() {
  if constexpr (std::is_same_v<E, float>)
    return {Backward::kSeparateDq, Backward::kAtomicDq};
  else
    return {Backward::kSeparateDq};
}

const char* name_of(Backward backward) {
  return backward == Backward::kAtomicDq ? "dq added with atomics" : "dq by its own kernel";
}

// The SIMT kernels in float, launched as tensor/cuda/attention.cu does.
template <int HEAD>
void run_kernels(const Case& t, const Operand<float>& q, const Operand<float>& k, const Operand<float>& v,
                 const Operand<float>& dout, Outputs<float>& o, Backward backward) {
  const AttentionSizes n{t.heads, t.queries, t.keys, t.qk_dim, t.v_dim};
  const unsigned heads = t.heads, batch = t.batch;
  const int tile = attention_tile<float>();
  emulate_launch({blocks(t.queries, tile), heads, batch}, kAttentionThreads,
                 attention_forward_shared_bytes<float, HEAD>(), attention_forward_kernel<float, float, HEAD>,
                 q.view<const float>(), k.view<const float>(), v.view<const float>(), o.out.view<float>(),
                 o.logsumexp(), n, t.scale, t.causal);
  // The atomic backward's delta kernel also zeroes dq, which starts as NaN
  // here: a row it missed would stay NaN.
  const bool atomic = backward == Backward::kAtomicDq;
  emulate_launch({blocks(t.queries, kDeltaRowsPerBlock), heads, batch}, kAttentionThreads, 0,
                 attention_delta_kernel<float, float>, o.out.view<const float>(), dout.view<const float>(),
                 o.delta.data(), n, atomic ? o.dq.view<float>() : AttentionOperand<float>{});
  if (atomic) {
    emulate_launch({blocks(t.keys, tile), heads, batch}, kAttentionThreads,
                   attention_dkdv_shared_bytes<float, HEAD>(), attention_dkdv_dq_kernel<float, HEAD>,
                   q.view<const float>(), k.view<const float>(), v.view<const float>(), dout.view<const float>(),
                   o.logsumexp(), o.delta.data(), o.dk.view<float>(), o.dv.view<float>(), o.dq.view<float>(), n,
                   t.scale, t.causal);
    return;
  }
  emulate_launch({blocks(t.keys, tile), heads, batch}, kAttentionThreads, attention_dkdv_shared_bytes<float, HEAD>(),
                 attention_dkdv_kernel<float, float, HEAD>, q.view<const float>(), k.view<const float>(),
                 v.view<const float>(), dout.view<const float>(), o.logsumexp(), o.delta.data(), o.dk.view<float>(),
                 o.dv.view<float>(), n, t.scale, t.causal);
  emulate_launch({blocks(t.queries, tile), heads, batch}, kAttentionThreads, attention_dq_shared_bytes<float, HEAD>(),
                 attention_dq_kernel<float, float, HEAD>, q.view<const float>(), k.view<const float>(),
                 v.view<const float>(), dout.view<const float>(), o.logsumexp(), o.delta.data(), o.dq.view<float>(), n,
                 t.scale, t.causal);
}

// The tensor-core kernels in bfloat16 (and the delta kernel), launched as
// tensor/cuda/attention.cu does.
template <int HEAD>
void run_kernels(const Case& t, const Operand<BFloat16>& q, const Operand<BFloat16>& k, const Operand<BFloat16>& v,
                 const Operand<BFloat16>& dout, Outputs<BFloat16>& o, Backward /*only kSeparateDq*/) {
  using S = BFloat16;
  const AttentionSizes n{t.heads, t.queries, t.keys, t.qk_dim, t.v_dim};
  const unsigned heads = t.heads, batch = t.batch;
  emulate_launch({blocks(t.queries, kTensorCoreRows), heads, batch}, kTensorCoreThreads,
                 tensor_core_forward_shared_bytes<HEAD>(), attention_forward_tensor_core_kernel<S, HEAD>,
                 q.view<const S>(), k.view<const S>(), v.view<const S>(), o.out.view<S>(), o.logsumexp(), n, t.scale,
                 t.causal);
  emulate_launch({blocks(t.queries, kDeltaRowsPerBlock), heads, batch}, kAttentionThreads, 0,
                 attention_delta_kernel<S, float>, o.out.view<const S>(), dout.view<const S>(), o.delta.data(), n,
                 AttentionOperand<float>{});
  emulate_launch({blocks(t.keys, kTensorCoreRows), heads, batch}, kTensorCoreThreads,
                 tensor_core_dkdv_shared_bytes<HEAD>(), attention_dkdv_tensor_core_kernel<S, HEAD>, q.view<const S>(),
                 k.view<const S>(), v.view<const S>(), dout.view<const S>(), o.logsumexp(), o.delta.data(),
                 o.dk.view<S>(), o.dv.view<S>(), n, t.scale, t.causal);
  emulate_launch({blocks(t.queries, kTensorCoreRows), heads, batch}, kTensorCoreThreads,
                 tensor_core_dq_shared_bytes<HEAD>(), attention_dq_tensor_core_kernel<S, HEAD>, q.view<const S>(),
                 k.view<const S>(), v.view<const S>(), dout.view<const S>(), o.logsumexp(), o.delta.data(),
                 o.dq.view<S>(), n, t.scale, t.causal);
}

template <typename E>
void run_and_compare(const Case& t, const Operand<E>& q, const Operand<E>& k, const Operand<E>& v,
                     const Operand<E>& dout, Outputs<E>& o, Backward backward) {
  if (std::max(t.qk_dim, t.v_dim) <= 64)
    run_kernels<64>(t, q, k, v, dout, o, backward);
  else
    run_kernels<128>(t, q, k, v, dout, o, backward);
  const Tolerance tolerance = std::is_same_v<E, float> ? kFloatTolerance : kBFloat16Tolerance;
  const Expected e = naive_attention(t, q, k, v, dout);
  expect_close(values_of(o.out), e.out, tolerance, "out");
  expect_close(o.logsumexp_values(), e.logsumexp, kFloatTolerance, "logsumexp");
  expect_close(values_of(o.dq), e.dq, tolerance, "dq");
  expect_close(values_of(o.dk), e.dk, tolerance, "dk");
  expect_close(values_of(o.dv), e.dv, tolerance, "dv");
}

// q, k, v and dout each in its own (B, T, H, width) memory, viewed as (B, H, T, width).
template <typename E>
void check_separate_projections(const Case& t) {
  std::mt19937 rng(1234);
  Buffer<E> q_memory(t.batch, t.heads, t.queries, t.qk_dim), k_memory(t.batch, t.heads, t.keys, t.qk_dim),
      v_memory(t.batch, t.heads, t.keys, t.v_dim), dout_memory(t.batch, t.heads, t.queries, t.v_dim);
  const Operand<E> q = q_memory.operand(t.qk_dim), k = k_memory.operand(t.qk_dim), v = v_memory.operand(t.v_dim),
                   dout = dout_memory.operand(t.v_dim);
  for (const Operand<E>& x : {q, k, v, dout}) randomize(x, rng);
  for (Backward backward : backwards_of<E>()) {
    SCOPED_TRACE(name_of(backward));
    Outputs<E> o(t, 0);
    run_and_compare(t, q, k, v, dout, o, backward);
  }
}

// q, k, v as the GPT layer makes them: slices of one (B, T, 3, H, D) projection.
template <typename E>
void check_fused_projection(const Case& t) {
  std::mt19937 rng(99);
  Buffer<E> qkv_memory(t.batch, t.heads, t.queries, t.qk_dim, 3), dout_memory(t.batch, t.heads, t.queries, t.v_dim);
  const Operand<E> q = qkv_memory.operand(t.qk_dim, 0), k = qkv_memory.operand(t.qk_dim, 1),
                   v = qkv_memory.operand(t.v_dim, 2), dout = dout_memory.operand(t.v_dim);
  for (const Operand<E>& x : {q, k, v, dout}) randomize(x, rng);
  for (Backward backward : backwards_of<E>()) {
    SCOPED_TRACE(name_of(backward));
    Outputs<E> o(t, 0);
    run_and_compare(t, q, k, v, dout, o, backward);
  }
}

// Inputs and outputs with rows longer than their elements, between guard
// bands, all of it NaN but the elements: the kernels read none of the rest
// (the results would be NaN) and write none of it.
template <typename E>
void check_touches_only_operands() {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const int keys = causal ? 20 : 70;
    const Case t{
        .batch = 2, .heads = 2, .queries = 20, .keys = keys, .qk_dim = 12, .v_dim = 7, .scale = 0.8f, .causal = causal};
    std::mt19937 rng(7);
    Buffer<E> qkv_memory(t.batch, t.heads, t.queries, t.qk_dim + 5, 3), k_memory(t.batch, t.heads, t.keys, 17),
        v_memory(t.batch, t.heads, t.keys, 9), dout_memory(t.batch, t.heads, t.queries, t.v_dim + 3);
    const Operand<E> q = qkv_memory.operand(t.qk_dim, 1), k = k_memory.operand(t.qk_dim), v = v_memory.operand(t.v_dim),
                     dout = dout_memory.operand(t.v_dim);
    for (const Operand<E>& x : {q, k, v, dout}) randomize(x, rng);
    for (Backward backward : backwards_of<E>()) {
      SCOPED_TRACE(name_of(backward));
      Outputs<E> o(t, 3);
      run_and_compare(t, q, k, v, dout, o, backward);
      EXPECT_TRUE(o.out_memory.untouched_outside(o.out));
      EXPECT_TRUE(o.dq_memory.untouched_outside(o.dq));
      EXPECT_TRUE(o.dk_memory.untouched_outside(o.dk));
      EXPECT_TRUE(o.dv_memory.untouched_outside(o.dv));
      EXPECT_TRUE(o.logsumexp_guards_untouched());
    }
  }
}

// ---- the SIMT kernels, in float ----

TEST(AttentionEmulated, CrossAttentionWithMoreKeysThanQueries) {
  check_separate_projections<float>(
      {.batch = 2, .heads = 2, .queries = 33, .keys = 90, .qk_dim = 40, .v_dim = 24, .scale = 0.37f, .causal = false});
}

// A scale of 2 makes each row's softmax peaked, and its maximum moves from
// tile to tile: the running rescaling is exercised.
TEST(AttentionEmulated, CausalSelfAttentionEndingMidTile) {
  check_separate_projections<float>(
      {.batch = 1, .heads = 2, .queries = 70, .keys = 70, .qk_dim = 40, .v_dim = 24, .scale = 2.0f, .causal = true});
}

// One head of the gpt benchmark's shape: the last query tile walks four key
// tiles, the first key tile's dk/dv four query tiles.
TEST(AttentionEmulated, CausalOverFourTiles) {
  check_separate_projections<float>({.batch = 1,
                                     .heads = 1,
                                     .queries = 256,
                                     .keys = 256,
                                     .qk_dim = 64,
                                     .v_dim = 64,
                                     .scale = 0.125f,
                                     .causal = true});
}

TEST(AttentionEmulated, CausalSingleToken) {
  check_separate_projections<float>(
      {.batch = 1, .heads = 2, .queries = 1, .keys = 1, .qk_dim = 3, .v_dim = 1, .scale = 0.5f, .causal = true});
}

// Causal with more keys than queries: the queries are the last 70 of 150
// positions, so the first sees 81 keys, and the shift (80) is no multiple
// of a tile. dk/dv's key tiles start from the query tile that sees them.
TEST(AttentionEmulated, CausalWithMoreKeysThanQueries) {
  check_separate_projections<float>(
      {.batch = 2, .heads = 2, .queries = 70, .keys = 150, .qk_dim = 40, .v_dim = 24, .scale = 2.0f, .causal = true});
}

// One query after eight keys (a decoding step): it sees all nine.
TEST(AttentionEmulated, CausalOneQueryAfterTheKeys) {
  check_separate_projections<float>(
      {.batch = 1, .heads = 3, .queries = 1, .keys = 9, .qk_dim = 8, .v_dim = 8, .scale = 0.7f, .causal = true});
}

TEST(AttentionEmulated, HeadDimsOfOne) {
  check_separate_projections<float>(
      {.batch = 1, .heads = 1, .queries = 3, .keys = 5, .qk_dim = 1, .v_dim = 1, .scale = 1.5f, .causal = false});
}

TEST(AttentionEmulated, CausalWidestHeadsFromAFusedProjection) {
  check_fused_projection<float>({.batch = 1,
                                 .heads = 2,
                                 .queries = 70,
                                 .keys = 70,
                                 .qk_dim = 128,
                                 .v_dim = 128,
                                 .scale = 1 / std::sqrt(128.0f),
                                 .causal = true});
}

TEST(AttentionEmulated, TouchesOnlyItsOperandsElements) { check_touches_only_operands<float>(); }

// ---- the tensor-core kernels, in bfloat16 ----

// Head dims that are not multiples of 16: the products skip the k-steps
// and column blocks past them.
TEST(AttentionTensorCoreEmulated, CrossAttentionWithMoreKeysThanQueries) {
  check_separate_projections<BFloat16>(
      {.batch = 2, .heads = 2, .queries = 33, .keys = 90, .qk_dim = 40, .v_dim = 24, .scale = 0.37f, .causal = false});
}

TEST(AttentionTensorCoreEmulated, CausalSelfAttentionEndingMidTile) {
  check_separate_projections<BFloat16>(
      {.batch = 1, .heads = 2, .queries = 70, .keys = 70, .qk_dim = 40, .v_dim = 24, .scale = 2.0f, .causal = true});
}

// The queries are the last 100 of 150 positions: the first sees 51 keys,
// the forward's tiles walk three key tiles, and dk/dv's key tiles start
// from the query tile that sees them (the shift, 50, is no multiple of one).
TEST(AttentionTensorCoreEmulated, CausalWithMoreKeysThanQueries) {
  check_separate_projections<BFloat16>(
      {.batch = 1, .heads = 1, .queries = 100, .keys = 150, .qk_dim = 64, .v_dim = 64, .scale = 0.3f, .causal = true});
}

// A few queries after many keys: the shift (170) passes whole key tiles.
TEST(AttentionTensorCoreEmulated, CausalFewQueriesAfterManyKeys) {
  check_separate_projections<BFloat16>(
      {.batch = 2, .heads = 1, .queries = 30, .keys = 200, .qk_dim = 40, .v_dim = 24, .scale = 0.5f, .causal = true});
}

// Head dims of 128: the backward's tiles of 32.
TEST(AttentionTensorCoreEmulated, CausalWidestHeadsFromAFusedProjection) {
  check_fused_projection<BFloat16>({.batch = 1,
                                    .heads = 2,
                                    .queries = 70,
                                    .keys = 70,
                                    .qk_dim = 128,
                                    .v_dim = 128,
                                    .scale = 1 / std::sqrt(128.0f),
                                    .causal = true});
}

TEST(AttentionTensorCoreEmulated, TouchesOnlyItsOperandsElements) { check_touches_only_operands<BFloat16>(); }

}  // namespace
}  // namespace loom::cuda
