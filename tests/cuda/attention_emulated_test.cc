// The CUDA attention kernels (tensor/cuda/attention_kernels.cuh) run on the
// CPU under tests/cuda/cuda_emulation.h and are compared with a naive
// double-precision attention: forward (out, logsumexp) and backward (dq, dk,
// dv), causal or not, with sequences that end mid-tile, head dims that are
// not multiples of 4, and heads interleaved in memory as a GPT lays them out.
// Needs no GPU.

// The emulator first: it defines what the kernels use of CUDA.
// clang-format off
#define LOOM_CUDA_EMULATION
#include "tests/cuda/cuda_emulation.h"
#include "tensor/cuda/attention_kernels.cuh"
// clang-format on

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace loom::cuda {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// An element may be off by kTolerance times the largest of |expected|, a
// tenth of its operand's largest |expected|, and 1e-3: float sums, some with
// cancellation, against double ones (seen: under 1e-5).
constexpr double kTolerance = 1e-4;

struct Case {
  int batch, heads, queries, keys, qk_dim, v_dim;
  float scale;
  bool causal;
};

// A (B, H, rows, width) view of a Buffer.
struct Operand {
  float* data;
  int64_t batch_stride, head_stride, row_stride;
  int batch, heads, rows, width;

  float& at(int b, int h, int r, int c) const { return data[b * batch_stride + h * head_stride + r * row_stride + c]; }
  template <typename S>
  AttentionOperand<S> view() const {
    return {data, batch_stride, head_stride, row_stride};
  }
};

// Memory for `slots` (B, H, rows, width) operands laid out as (B, rows,
// slots, H, pitch), as a GPT's q, k, v projection lays out heads (3 slots
// when fused), between guard bands. Every float starts as NaN: a kernel that
// reads outside its operands, or leaves an output element unwritten, gets
// or leaves a NaN that the comparisons catch.
class Buffer {
 public:
  Buffer(int batch, int heads, int rows, int pitch, int slots = 1)
      : batch_(batch),
        heads_(heads),
        rows_(rows),
        pitch_(pitch),
        slots_(slots),
        memory_(2 * kGuard + static_cast<size_t>(batch) * rows * slots * heads * pitch, kNaN) {}

  Operand operand(int width, int slot = 0) {
    const int64_t row_stride = int64_t{slots_} * heads_ * pitch_;
    float* first = memory_.data() + kGuard + slot * heads_ * pitch_;
    return {first, rows_ * row_stride, pitch_, row_stride, batch_, heads_, rows_, width};
  }

  // Whether every float outside `o`'s elements is still the NaN it started as.
  bool untouched_outside(const Operand& o) const {
    std::vector<bool> inside(memory_.size(), false);
    for (int b = 0; b < o.batch; ++b)
      for (int h = 0; h < o.heads; ++h)
        for (int r = 0; r < o.rows; ++r)
          for (int c = 0; c < o.width; ++c) inside[&o.at(b, h, r, c) - memory_.data()] = true;
    for (size_t i = 0; i < memory_.size(); ++i)
      if (!inside[i] && std::memcmp(&memory_[i], &kNaN, sizeof(float)) != 0) return false;
    return true;
  }

 private:
  static constexpr int kGuard = 64;
  int batch_, heads_, rows_, pitch_, slots_;
  std::vector<float> memory_;
};

void randomize(const Operand& o, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int b = 0; b < o.batch; ++b)
    for (int h = 0; h < o.heads; ++h)
      for (int r = 0; r < o.rows; ++r)
        for (int c = 0; c < o.width; ++c) o.at(b, h, r, c) = uniform(rng);
}

// An operand's values in double, (B, H, rows, width) contiguous.
using Values = std::vector<double>;

Values values_of(const Operand& o) {
  Values v;
  for (int b = 0; b < o.batch; ++b)
    for (int h = 0; h < o.heads; ++h)
      for (int r = 0; r < o.rows; ++r)
        for (int c = 0; c < o.width; ++c) v.push_back(o.at(b, h, r, c));
  return v;
}

double dot(const Operand& x, int b, int h, int i, const Operand& y, int j) {
  double sum = 0;
  for (int c = 0; c < x.width; ++c) sum += static_cast<double>(x.at(b, h, i, c)) * y.at(b, h, j, c);
  return sum;
}

struct Expected {
  Values out, logsumexp, dq, dk, dv;
};

// Attention as the formulas say it, one score at a time, in double.
Expected naive_attention(const Case& t, const Operand& q, const Operand& k, const Operand& v, const Operand& dout) {
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
        const int seen = t.causal ? i + 1 : t.keys;
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
          for (int c = 0; c < t.v_dim; ++c) out[c] += p[j] * v.at(b, h, j, c);

        double delta = 0;
        for (int c = 0; c < t.v_dim; ++c) delta += dout.at(b, h, i, c) * out[c];
        for (int j = 0; j < seen; ++j) {
          const double ds = p[j] * (dot(dout, b, h, i, v, j) - delta);
          for (int c = 0; c < t.v_dim; ++c) e.dv[(bh * t.keys + j) * t.v_dim + c] += p[j] * dout.at(b, h, i, c);
          for (int c = 0; c < t.qk_dim; ++c) {
            e.dq[(bh * t.queries + i) * t.qk_dim + c] += t.scale * ds * k.at(b, h, j, c);
            e.dk[(bh * t.keys + j) * t.qk_dim + c] += t.scale * ds * q.at(b, h, i, c);
          }
        }
      }
    }
  return e;
}

void expect_close(const Values& actual, const Values& expected, const char* what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double largest = 0;
  for (double x : expected) largest = std::max(largest, std::abs(x));
  int reported = 0;
  for (size_t i = 0; i < actual.size() && reported < 5; ++i) {
    const double allowed = kTolerance * std::max({std::abs(expected[i]), largest / 10, 1e-3});
    if (!(std::abs(actual[i] - expected[i]) <= allowed)) {  // NaN fails too
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", expected " << expected[i];
      ++reported;
    }
  }
}

// The kernels' outputs, in buffers of the given row pitch slack (0: packed).
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
  Buffer out_memory, dq_memory, dk_memory, dv_memory;
  Operand out, dq, dk, dv;
  std::vector<float> logsumexp_memory, delta;
};

unsigned blocks(int rows, int per_block) { return static_cast<unsigned>((rows + per_block - 1) / per_block); }

// The four kernels, launched as tensor/cuda/attention.cu does.
template <int HEAD>
void run_kernels(const Case& t, const Operand& q, const Operand& k, const Operand& v, const Operand& dout, Outputs& o) {
  const AttentionSizes n{t.heads, t.queries, t.keys, t.qk_dim, t.v_dim};
  const unsigned heads = t.heads, batch = t.batch;
  const int tile = attention_tile<float>();
  emulate_launch({blocks(t.queries, tile), heads, batch}, kAttentionThreads,
                 attention_forward_shared_bytes<float, HEAD>(), attention_forward_kernel<float, float, HEAD>,
                 q.view<const float>(), k.view<const float>(), v.view<const float>(), o.out.view<float>(),
                 o.logsumexp(), n, t.scale, t.causal);
  emulate_launch({blocks(t.queries, kDeltaRowsPerBlock), heads, batch}, kAttentionThreads, 0,
                 attention_delta_kernel<float, float>, o.out.view<const float>(), dout.view<const float>(),
                 o.delta.data(), n);
  emulate_launch({blocks(t.keys, tile), heads, batch}, kAttentionThreads, attention_dkdv_shared_bytes<float, HEAD>(),
                 attention_dkdv_kernel<float, float, HEAD>, q.view<const float>(), k.view<const float>(),
                 v.view<const float>(), dout.view<const float>(), o.logsumexp(), o.delta.data(), o.dk.view<float>(),
                 o.dv.view<float>(), n, t.scale, t.causal);
  emulate_launch({blocks(t.queries, tile), heads, batch}, kAttentionThreads, attention_dq_shared_bytes<float, HEAD>(),
                 attention_dq_kernel<float, float, HEAD>, q.view<const float>(), k.view<const float>(),
                 v.view<const float>(), dout.view<const float>(), o.logsumexp(), o.delta.data(), o.dq.view<float>(), n,
                 t.scale, t.causal);
}

void run_and_compare(const Case& t, const Operand& q, const Operand& k, const Operand& v, const Operand& dout,
                     Outputs& o) {
  if (std::max(t.qk_dim, t.v_dim) <= 64)
    run_kernels<64>(t, q, k, v, dout, o);
  else
    run_kernels<128>(t, q, k, v, dout, o);
  const Expected e = naive_attention(t, q, k, v, dout);
  expect_close(values_of(o.out), e.out, "out");
  expect_close(o.logsumexp_values(), e.logsumexp, "logsumexp");
  expect_close(values_of(o.dq), e.dq, "dq");
  expect_close(values_of(o.dk), e.dk, "dk");
  expect_close(values_of(o.dv), e.dv, "dv");
}

// q, k, v and dout each in its own (B, T, H, width) memory, viewed as (B, H, T, width).
void check_separate_projections(const Case& t) {
  std::mt19937 rng(1234);
  Buffer q_memory(t.batch, t.heads, t.queries, t.qk_dim), k_memory(t.batch, t.heads, t.keys, t.qk_dim),
      v_memory(t.batch, t.heads, t.keys, t.v_dim), dout_memory(t.batch, t.heads, t.queries, t.v_dim);
  const Operand q = q_memory.operand(t.qk_dim), k = k_memory.operand(t.qk_dim), v = v_memory.operand(t.v_dim),
                dout = dout_memory.operand(t.v_dim);
  for (const Operand& x : {q, k, v, dout}) randomize(x, rng);
  Outputs o(t, 0);
  run_and_compare(t, q, k, v, dout, o);
}

TEST(AttentionEmulated, CrossAttentionWithMoreKeysThanQueries) {
  check_separate_projections(
      {.batch = 2, .heads = 2, .queries = 33, .keys = 90, .qk_dim = 40, .v_dim = 24, .scale = 0.37f, .causal = false});
}

// A scale of 2 makes each row's softmax peaked, and its maximum moves from
// tile to tile: the running rescaling is exercised.
TEST(AttentionEmulated, CausalSelfAttentionEndingMidTile) {
  check_separate_projections(
      {.batch = 1, .heads = 2, .queries = 70, .keys = 70, .qk_dim = 40, .v_dim = 24, .scale = 2.0f, .causal = true});
}

// One head of the gpt benchmark's shape: the last query tile walks four key
// tiles, the first key tile's dk/dv four query tiles.
TEST(AttentionEmulated, CausalOverFourTiles) {
  check_separate_projections(
      {.batch = 1, .heads = 1, .queries = 256, .keys = 256, .qk_dim = 64, .v_dim = 64, .scale = 0.125f, .causal = true});
}

TEST(AttentionEmulated, CausalSingleToken) {
  check_separate_projections(
      {.batch = 1, .heads = 2, .queries = 1, .keys = 1, .qk_dim = 3, .v_dim = 1, .scale = 0.5f, .causal = true});
}

TEST(AttentionEmulated, HeadDimsOfOne) {
  check_separate_projections(
      {.batch = 1, .heads = 1, .queries = 3, .keys = 5, .qk_dim = 1, .v_dim = 1, .scale = 1.5f, .causal = false});
}

// q, k, v as the GPT layer makes them: slices of one (B, T, 3, H, 128) projection.
TEST(AttentionEmulated, CausalWidestHeadsFromAFusedProjection) {
  const Case t{.batch = 1,
               .heads = 2,
               .queries = 70,
               .keys = 70,
               .qk_dim = 128,
               .v_dim = 128,
               .scale = 1 / std::sqrt(128.0f),
               .causal = true};
  std::mt19937 rng(99);
  Buffer qkv_memory(t.batch, t.heads, t.queries, t.qk_dim, 3), dout_memory(t.batch, t.heads, t.queries, t.v_dim);
  const Operand q = qkv_memory.operand(t.qk_dim, 0), k = qkv_memory.operand(t.qk_dim, 1),
                v = qkv_memory.operand(t.v_dim, 2), dout = dout_memory.operand(t.v_dim);
  for (const Operand& x : {q, k, v, dout}) randomize(x, rng);
  Outputs o(t, 0);
  run_and_compare(t, q, k, v, dout, o);
}

// Inputs and outputs with rows longer than their elements, between guard
// bands, all of it NaN but the elements: the kernels read none of the rest
// (the results would be NaN) and write none of it.
TEST(AttentionEmulated, TouchesOnlyItsOperandsElements) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const int keys = causal ? 20 : 70;
    const Case t{
        .batch = 2, .heads = 2, .queries = 20, .keys = keys, .qk_dim = 12, .v_dim = 7, .scale = 0.8f, .causal = causal};
    std::mt19937 rng(7);
    Buffer qkv_memory(t.batch, t.heads, t.queries, t.qk_dim + 5, 3), k_memory(t.batch, t.heads, t.keys, 17),
        v_memory(t.batch, t.heads, t.keys, 9), dout_memory(t.batch, t.heads, t.queries, t.v_dim + 3);
    const Operand q = qkv_memory.operand(t.qk_dim, 1), k = k_memory.operand(t.qk_dim), v = v_memory.operand(t.v_dim),
                  dout = dout_memory.operand(t.v_dim);
    for (const Operand& x : {q, k, v, dout}) randomize(x, rng);
    Outputs o(t, 3);
    run_and_compare(t, q, k, v, dout, o);
    EXPECT_TRUE(o.out_memory.untouched_outside(o.out));
    EXPECT_TRUE(o.dq_memory.untouched_outside(o.dq));
    EXPECT_TRUE(o.dk_memory.untouched_outside(o.dk));
    EXPECT_TRUE(o.dv_memory.untouched_outside(o.dv));
    EXPECT_TRUE(o.logsumexp_guards_untouched());
  }
}

}  // namespace
}  // namespace loom::cuda
