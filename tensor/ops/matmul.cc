// Matrix products. bmm is the primitive (one kernel, one backward); mm and
// matmul reshape their operands onto it, so their gradients come for free.
// addmm (a product plus a bias row, a Linear layer's op) is the one other
// kernel: the backend adds the bias as the product is written.
#include "tensor/autocast.h"
#include "tensor/flop_counter.h"
#include "tensor/ops.h"
#include "tensor/ops/op_utils.h"

namespace loom {
namespace {

void check_matmul_operands(const char* op, const Tensor& a, const Tensor& b) {
  detail::check_same_device(op, a, b);
  detail::check_floating(op, a);
  LOOM_CHECK(a.dtype() == b.dtype(), op, ": expected operands of one dtype, got ", a.dtype(),
             " and ", b.dtype());
}

// Whether each matrix of a (rows, cols) or (batch, rows, cols) tensor is
// stored column by column: a transposed view of a contiguous one.
bool is_transposed_matrices(const Tensor& t) {
  const int rows = t.dim() - 2, cols = t.dim() - 1;
  return t.size(rows) > 1 && t.size(cols) > 1 && t.stride(rows) == 1 && t.stride(cols) == t.size(rows);
}

Tensor transposed(const Tensor& t) { return t.transpose(-2, -1); }
Tensor batched_product(const char* op, const Tensor& a, const Tensor& b);

// The gradients of y = a @ b (both 2-D or both 3-D) for the operands that
// need them: dy @ b^T for a and a^T @ dy for b; transposes are views. An
// operand that is a transposed view (a Linear's weight.t()) gets its
// gradient in its own layout, computed transposed: then the gradient of the
// transpose, and the parameter's .grad(), are contiguous, where they would
// otherwise be copied once more. The two are separate products, so a split
// backward (autograd/split_backward.h) can ask for one now, the other later.
class ProductGradients {
 public:
  // `op`: the name a 3-D product's gradient products count under, as
  // PyTorch's: "mm" for mm (a batch of one here), "bmm" for bmm.
  ProductGradients(const Tensor& a, const Tensor& b, const char* op = "bmm")
      : op_(op),
        needs_a_(a.requires_grad()),
        needs_b_(b.requires_grad()),
        a_transposed_(is_transposed_matrices(a)),
        b_transposed_(is_transposed_matrices(b)),
        a_(needs_b_ ? autograd::SavedTensor(a) : autograd::SavedTensor()),
        b_(needs_a_ ? autograd::SavedTensor(b) : autograd::SavedTensor()) {}

  // {d a, d b}, each undefined where that operand needs none or is not wanted.
  TensorList operator()(const Tensor& dy, bool want_a = true, bool want_b = true) const {
    Tensor da, db;
    if (needs_a_ && want_a)
      da = a_transposed_ ? transposed(product(b_.get(), transposed(dy))) : product(dy, transposed(b_.get()));
    if (needs_b_ && want_b)
      db = b_transposed_ ? transposed(product(transposed(dy), a_.get())) : product(transposed(a_.get()), dy);
    return {da, db};
  }

 private:
  Tensor product(const Tensor& a, const Tensor& b) const {
    return a.dim() == 2 ? mm(a, b) : batched_product(op_, a, b);
  }

  const char* op_;
  bool needs_a_, needs_b_, a_transposed_, b_transposed_;
  autograd::SavedTensor a_, b_;
};

// A (rows, cols) matrix as a batch of one, (1, rows, cols): a view, not recorded.
Tensor as_batch_of_one(const Tensor& t) {
  return as_strided(t, Shape({1, t.size(0), t.size(1)}), Strides({t.size(0) * t.stride(0), t.stride(0), t.stride(1)}),
                    t.storage_offset());
}

// bmm, or mm on a batch of one: `op` names the FLOPs it counts (tensor/flop_counter.h).
Tensor batched_product(const char* op, const Tensor& a, const Tensor& b) {
  Tensor y = empty({a.size(0), a.size(1), b.size(2)}, a.options());
  if (y.numel() > 0) {
    if (a.size(2) == 0) {
      backend_for(y.device()).fill(y, 0);
    } else {
      backend_for(y.device()).matmul(a, b, Tensor(), y);
      count_flops(op, flops::bmm(a.size(0), a.size(1), a.size(2), b.size(2)));
    }
  }
  if (autograd::needs_grad(a, b))
    autograd::record_selective(
        "BmmBackward", {a, b}, {y},
        [gradients = ProductGradients(a, b, op)](const TensorList& g, const autograd::InputMask& w) {
          return gradients(g[0], autograd::wants(w, 0), autograd::wants(w, 1));
        });
  return y;
}

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("bmm", a, b);
  LOOM_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes ", a.shape(),
             " and ", b.shape());
  LOOM_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.shape(), " and ",
             b.shape(), " cannot be multiplied (batch sizes or inner sizes differ)");
  return batched_product("bmm", a, b);
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("mm", a, b);
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got shapes ", a.shape(),
             " and ", b.shape());
  LOOM_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.shape(), " and ", b.shape(),
             " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  return batched_product("mm", a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
}

Tensor addmm(const Tensor& bias, const Tensor& a, const Tensor& b) {
  if (autocast_wants_low({bias, a, b}))
    return addmm(autocast_to_low(bias), autocast_to_low(a), autocast_to_low(b));
  check_matmul_operands("addmm", a, b);
  detail::check_same_device("addmm", a, bias);
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2, "addmm: expected 2-D operands, got shapes ", a.shape(), " and ",
             b.shape());
  LOOM_CHECK(a.size(1) == b.size(0), "addmm: shapes ", a.shape(), " and ", b.shape(), " cannot be multiplied (",
             a.size(1), " != ", b.size(0), ")");
  LOOM_CHECK(bias.dtype() == a.dtype(), "addmm: expected a bias of the operands' dtype ", a.dtype(), ", got ",
             bias.dtype());
  const int64_t m = a.size(0), n = b.size(1);
  // A bias row is the fused kernel's case; other broadcasts (a column, a
  // whole matrix) add after the product.
  if (bias.dim() != 1 || bias.size(0) != n) {
    LOOM_CHECK(broadcast_shapes(bias.shape(), Shape({m, n}), "addmm") == Shape({m, n}), "addmm: a bias of shape ",
               bias.shape(), " does not broadcast to the product's ", Shape({m, n}));
    return mm(a, b) + bias;
  }
  Tensor y = empty({m, n}, a.options());
  if (y.numel() > 0) {
    Backend& backend = backend_for(y.device());
    const Tensor row = bias.is_contiguous() ? bias : contiguous_copy(bias);
    if (a.size(1) == 0) {
      backend.copy(detail::expand_raw(row, y.shape()), y);
    } else {
      backend.matmul(as_batch_of_one(a), as_batch_of_one(b), row, as_batch_of_one(y));
      count_flops("addmm", flops::mm(m, a.size(1), n));  // PyTorch counts the bias as free
    }
  }
  if (autograd::needs_grad({bias, a, b}))
    autograd::record_selective(
        "AddmmBackward", {bias, a, b}, {y},
        [gradients = ProductGradients(a, b), needs_bias = bias.requires_grad()](const TensorList& g,
                                                                                const autograd::InputMask& w) {
          TensorList d = gradients(g[0], autograd::wants(w, 1), autograd::wants(w, 2));
          return TensorList{needs_bias && autograd::wants(w, 0) ? g[0].sum({0}) : Tensor(), d[0], d[1]};
        });
  return y;
}

namespace {

// The product of t's sizes before its last `kept` dims: the rows (or
// batches) a reshape folds them into. Written out, not left to reshape's -1,
// which cannot infer a size when the kept dims hold no elements.
int64_t leading_numel(const Tensor& t, int kept) {
  int64_t n = 1;
  for (int d = 0; d < t.dim() - kept; ++d) n *= t.size(d);
  return n;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast_wants_low({a, b})) return matmul(autocast_to_low(a), autocast_to_low(b));
  check_matmul_operands("matmul", a, b);
  LOOM_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands need at least one dimension, got ",
             a.shape(), " and ", b.shape());
  // Vectors become matrices, and lose that dim again at the end.
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  LOOM_CHECK(k == b2.size(-2), "matmul: shapes ", a.shape(), " and ", b.shape(),
             " cannot be multiplied (", k, " != ", b2.size(-2), ")");

  Tensor y;
  if (b2.dim() == 2) {
    // (..., M, K) @ (K, N): fold the batch into M, one large GEMM.
    std::vector<int64_t> batch(a2.shape().begin(), a2.shape().end() - 2);
    Tensor flat = a2.reshape({leading_numel(a2, 1), k});
    y = mm(flat, b2);
    batch.push_back(m);
    batch.push_back(n);
    y = y.reshape(batch);
  } else {
    Shape a_batch(std::vector<int64_t>(a2.shape().begin(), a2.shape().end() - 2));
    Shape b_batch(std::vector<int64_t>(b2.shape().begin(), b2.shape().end() - 2));
    std::vector<int64_t> batch = broadcast_shapes(a_batch, b_batch, "matmul").vec();
    std::vector<int64_t> a_full = batch, b_full = batch, y_shape = batch;
    a_full.insert(a_full.end(), {m, k});
    b_full.insert(b_full.end(), {k, n});
    y_shape.insert(y_shape.end(), {m, n});
    const int64_t batches = numel(Shape(batch));
    Tensor a3 = a2.expand(a_full).reshape({batches, m, k});
    Tensor b3 = b2.expand(b_full).reshape({batches, k, n});
    y = bmm(a3, b3).reshape(y_shape);
  }
  if (a.dim() == 1) y = y.squeeze(-2);
  if (b.dim() == 1) y = y.squeeze(-1);
  return y;
}

}  // namespace loom
