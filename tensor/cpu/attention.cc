// CPU fused attention: softmax(scale q k^T) v a block of queries at a time,
// so the scores exist only as one block's rows (a block x Tk, in a
// per-thread buffer) and never as a (Tq, Tk) tensor. With a causal mask a
// block multiplies only the keys its last query can see. Query blocks
// (forward) or (B, H) slices (backward, which adds each block into the
// slice's dk and dv) go to threads; each block's products are GEMMs
// (tensor/cpu/gemm.h) on strided views of q, k and v.
// The keys' operands (k^T and v; in the backward v^T and k) are the same
// for every block of a slice, which multiplies by their leading part: in
// float32, where loom's packed kernel runs (tensor/cpu/packed_gemm.h), they
// are packed once a slice, and the blocks are 16 queries, so a causal block
// skips all but 16 of the masked keys (a 64-token sequence: 5/8 of the
// unmasked products); elsewhere blocks are 64 queries. (Backward blocks of
// 32, whose dk and dv sums run deeper, measured level with 16 on the
// layers' strided q, k and v.)
// Masked weights are written as zeros, not computed as exp(-inf): Eigen's
// vectorised exp clamps its argument and returns a denormal there, and a
// GEMM reading denormals runs about 100 times slower.
//
// The backward recomputes a block's attention weights from q, k and the
// saved logsumexp (P = exp(s - L)) instead of keeping them:
//   delta_i = dout_i . out_i,   dS = P (dout v^T - delta),
//   dq = scale dS k,   dk += scale dS^T q,   dv += P^T dout.
#include <algorithm>
#include <cmath>
#include <optional>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/eigen_maps.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/gemm.h"
#include "tensor/cpu/packed_gemm.h"
#include "tensor/cpu/parallel.h"
#include "tensor/cpu/vector_math.h"

namespace loom::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;         // rows of a block whose products read the keys in place
constexpr int64_t kPackedQueryBlock = 16;   // rows of a block multiplying the slice's packed keys

template <typename T>
using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Rows of a (B, H, T, D) tensor's slice: T x D with its row stride.
template <typename T>
using RowsMap = Eigen::Map<RowMajor<T>, 0, Eigen::OuterStride<>>;

// A (B, H, T, D) tensor's (b, h) slices as rows (stride 1 along the last
// dim), its strides read once a call rather than at every block.
template <typename T>
class Slices {
 public:
  explicit Slices(const Tensor& t)
      : data_(t.data_ptr<T>()), batch_(t.stride(0)), head_(t.stride(1)), row_(t.stride(2)), cols_(t.size(3)) {}
  // Rows [first_row, first_row + count) of slice (b, h).
  RowsMap<T> rows(int64_t b, int64_t h, int64_t first_row, int64_t count) const {
    return RowsMap<T>(data_ + b * batch_ + h * head_ + first_row * row_, count, cols_, Eigen::OuterStride<>(row_));
  }

 private:
  T* data_;
  int64_t batch_, head_, row_, cols_;
};

// The causal mask's queries are the last tq of the tk keys' positions: query
// i sits at key position i + tk - tq.
int64_t position_of(int64_t query, int64_t tq, int64_t tk) { return query + tk - tq; }

// The keys queries [q0, q1) attend to: all, or with the causal mask those up to q1 - 1's position.
int64_t keys_seen(const AttentionParams& p, int64_t q1, int64_t tq, int64_t tk) {
  return p.causal ? std::min(position_of(q1, tq, tk), tk) : tk;
}

// Operands of gemm (tensor/cpu/gemm.h): a row-major map as it is, or its transpose.
template <typename Map>
GemmOperand<typename Map::Scalar> as_is(const Map& m) {
  return {m.data(), m.outerStride(), true};
}
template <typename Map>
GemmOperand<typename Map::Scalar> transposed(const Map& m) {
  return {m.data(), m.outerStride(), false};
}

// A right operand (k x n) that each query block of a slice multiplies by
// its leading part, a[0:m, 0:k'] b[0:k', 0:n'] with k' <= k, n' <= n. In
// float32, where the packed kernel beats Eigen's GEMM on a block of
// queries (gemm.h's rule), b is packed once for the whole slice into this
// thread's memory `which` (it only grows); otherwise gemm reads it in place.
template <typename T>
class KeysOperand {
 public:
  static bool packs(int64_t k, int64_t n) {
    if constexpr (std::is_same_v<T, float>) return packed_gemm_wins(kPackedQueryBlock, n, k, /*a_row_major=*/true);
    return false;
  }
  KeysOperand(int which, const GemmOperand<T>& b, int64_t k, int64_t n) : b_(b) {
    if constexpr (std::is_same_v<T, float>) {
      if (!packs(k, n)) return;
      thread_local std::vector<float> storage[3];
      std::vector<float>& memory = storage[which];
      const int64_t size = PackedMatrix::storage_size(k, n);
      if (memory.size() < static_cast<size_t>(size)) memory.resize(size);
      packed_.emplace(b, k, n, memory.data());
    }
  }
  // c (m x n, row pitch ldc) = alpha a b[0:k, 0:n], or += with `accumulate`.
  void multiply(const GemmOperand<T>& a, int64_t m, int64_t k, int64_t n, T* c, int64_t ldc, T alpha = T(1),
                bool accumulate = false) const {
    if constexpr (std::is_same_v<T, float>) {
      if (packed_) return packed_->multiply_leading(a, m, k, n, c, ldc, {nullptr, alpha, accumulate});
    }
    gemm<T>(a, b_, c, ldc, m, n, k, alpha, accumulate);
  }

 private:
  GemmOperand<T> b_;
  std::optional<PackedMatrix> packed_;  // float32 only
};

// Queries a block: 16 where the slice's k^T (d x tk) is packed, else 64.
template <typename T>
int64_t query_block(int64_t d, int64_t tk) {
  return KeysOperand<T>::packs(d, tk) ? kPackedQueryBlock : kQueryBlock;
}

// How many keys query `query` sees in a block of `keys`.
int64_t seen_by(const AttentionParams& p, int64_t query, int64_t tq, int64_t tk, int64_t keys) {
  return p.causal ? std::min(position_of(query, tq, tk) + 1, keys) : keys;
}

// A rows x keys block of this thread's scratch memory `which` (0 or 1). The
// memory only grows, so blocks of changing sizes (the causal mask's) cost
// no allocation once it has reached the largest. It is aligned to Eigen's
// packets: Eigen peels a map's unaligned first elements off its sums, so a
// buffer wherever malloc put it would round them one way or another with
// the process's heap layout (the same run gave different losses when
// started from a longer path).
template <typename T>
RowsMap<T> score_block(int which, int64_t rows, int64_t keys) {
  using Buffer = std::vector<T, Eigen::aligned_allocator<T>>;
  thread_local Buffer buffers[2];
  Buffer& buffer = buffers[which];
  if (buffer.size() < static_cast<size_t>(rows * keys)) buffer.resize(rows * keys);
  return RowsMap<T>(buffer.data(), rows, keys, Eigen::OuterStride<>(keys));
}

// row[0:seen) = exp(row - shift), and the masked keys' weights past `seen`
// exact zeros. The exponential runs over the whole row, masked keys
// included (whose values it overwrites), so that every element of a
// float32 row is computed in vector registers (exp_shifted,
// tensor/cpu/vector_math.h).
template <typename Row, typename T>
void exp_of_row_less(Row row, T shift, int64_t seen) {
  exp_shifted(row.data(), row.size(), shift);
  row.tail(row.size() - seen).setZero();
}

template <typename T, typename L>
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                       const Tensor& out, const Tensor& logsumexp) {
  const int64_t heads = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  const int64_t block = query_block<T>(d, tk), blocks = (tq + block - 1) / block;
  L* lse = logsumexp.data_ptr<L>();
  const Slices<T> q_slices(q), k_slices(k), v_slices(v), out_slices(out);
  // Query blocks are independent here: threads take them from every (b, h),
  // so that one long sequence of one head still uses them all. A thread
  // takes the keys' operands of a slice when it reaches its first block there.
  parallel_for(q.size(0) * heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::optional<KeysOperand<T>> keys_t, values;  // k^T (d x tk), v (tk x dv)
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bh = item / blocks, b = bh / heads, h = bh % heads;
      const int64_t q0 = item % blocks * block;
      if (item == begin || q0 == 0) {
        keys_t.emplace(0, transposed(k_slices.rows(b, h, 0, tk)), d, tk);
        values.emplace(1, as_is(v_slices.rows(b, h, 0, tk)), tk, dv);
      }
      const int64_t rows = std::min(block, tq - q0), keys = keys_seen(p, q0 + rows, tq, tk);
      RowsMap<T> s = score_block<T>(0, rows, keys);
      keys_t->multiply(as_is(q_slices.rows(b, h, q0, rows)), rows, d, keys, s.data(), keys, static_cast<T>(p.scale));
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t seen = seen_by(p, q0 + r, tq, tk, keys);  // >= 1: every query sees key 0
        auto row = s.row(r).head(seen);
        const T max = row.maxCoeff();
        exp_of_row_less(s.row(r), max, seen);
        const T sum = fixed_order_sum(row.array());
        row /= sum;
        lse[bh * tq + q0 + r] = static_cast<L>(max + std::log(sum));
      }
      RowsMap<T> out_rows = out_slices.rows(b, h, q0, rows);
      values->multiply(as_is(s), rows, keys, dv, out_rows.data(), out_rows.outerStride());
    }
  });
}

template <typename T, typename L>
void attention_backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& dout, const Tensor& logsumexp, const AttentionParams& p,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const int64_t heads = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv_cols = v.size(3);
  const int64_t block = query_block<T>(d, tk);
  const L* lse = logsumexp.data_ptr<L>();
  const T scale = static_cast<T>(p.scale);
  const Slices<T> q_slices(q), k_slices(k), v_slices(v), out_slices(out), dout_slices(dout), dq_slices(dq),
      dk_slices(dk), dv_slices(dv);
  parallel_for(q.size(0) * heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const KeysOperand<T> keys_t(0, transposed(k_slices.rows(b, h, 0, tk)), d, tk),
          values_t(1, transposed(v_slices.rows(b, h, 0, tk)), dv_cols, tk), keys(2, as_is(k_slices.rows(b, h, 0, tk)), tk, d);
      RowsMap<T> dk_all = dk_slices.rows(b, h, 0, tk), dv_all = dv_slices.rows(b, h, 0, tk);
      dk_all.setZero();
      dv_all.setZero();
      for (int64_t q0 = 0; q0 < tq; q0 += block) {
        const int64_t rows = std::min(block, tq - q0), seen = keys_seen(p, q0 + rows, tq, tk);
        const RowsMap<T> qb = q_slices.rows(b, h, q0, rows), ob = out_slices.rows(b, h, q0, rows),
                         dob = dout_slices.rows(b, h, q0, rows);
        RowsMap<T> weights = score_block<T>(0, rows, seen);
        keys_t.multiply(as_is(qb), rows, d, seen, weights.data(), seen, scale);
        for (int64_t r = 0; r < rows; ++r)  // P = exp(s - L)
          exp_of_row_less(weights.row(r), static_cast<T>(lse[bh * tq + q0 + r]), seen_by(p, q0 + r, tq, tk, seen));
        gemm<T>(transposed(weights), as_is(dob), dv_all.data(), dv_all.outerStride(), seen, dv_cols, rows, T(1),
                /*accumulate=*/true);
        RowsMap<T> dscores = score_block<T>(1, rows, seen);
        values_t.multiply(as_is(dob), rows, dv_cols, seen, dscores.data(), seen);
        for (int64_t r = 0; r < rows; ++r) {
          const T delta = dob.row(r).dot(ob.row(r));
          dscores.row(r) = weights.row(r).array() * (dscores.row(r).array() - delta);
        }
        RowsMap<T> dq_rows = dq_slices.rows(b, h, q0, rows);
        keys.multiply(as_is(dscores), rows, seen, d, dq_rows.data(), dq_rows.outerStride(), scale);
        gemm<T>(transposed(dscores), as_is(qb), dk_all.data(), dk_all.outerStride(), seen, d, rows, scale,
                /*accumulate=*/true);
      }
    }
  });
}

}  // namespace

void CpuBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                           const Tensor& out, const Tensor& logsumexp) {
  if (run_in_float32({q, k, v, out, logsumexp}, {3},
                     [&](const TensorList& t) { attention(t[0], t[1], t[2], p, t[3], t[4]); }))
    return;
  if (q.dtype() == kFloat64) return attention_forward<double, double>(q, k, v, p, out, logsumexp);
  LOOM_CHECK(q.dtype() == kFloat32, "attention: expected floating-point tensors, got ", q.dtype());
  attention_forward<float, float>(q, k, v, p, out, logsumexp);
}

void CpuBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& dout, const Tensor& logsumexp, const AttentionParams& p,
                                    const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  if (run_in_float32({q, k, v, out, dout, logsumexp, dq, dk, dv}, {6, 7, 8}, [&](const TensorList& t) {
        attention_backward(t[0], t[1], t[2], t[3], t[4], t[5], p, t[6], t[7], t[8]);
      }))
    return;
  if (q.dtype() == kFloat64)
    return attention_backward_impl<double, double>(q, k, v, out, dout, logsumexp, p, dq, dk, dv);
  LOOM_CHECK(q.dtype() == kFloat32, "attention_backward: expected floating-point tensors, got ", q.dtype());
  attention_backward_impl<float, float>(q, k, v, out, dout, logsumexp, p, dq, dk, dv);
}

}  // namespace loom::cpu
