// Matrix products. bmm is the primitive (one kernel, one backward); mm and
// matmul reshape their operands onto it, so their gradients come for free.
#include "tensor/autocast.h"
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

// Whether each matrix of a (batch, rows, cols) tensor is stored column by
// column: a transposed view of a contiguous one.
bool is_transposed_matrices(const Tensor& t) {
  return t.size(1) > 1 && t.size(2) > 1 && t.stride(1) == 1 && t.stride(2) == t.size(1);
}

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("bmm", a, b);
  LOOM_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes ", a.shape(),
             " and ", b.shape());
  LOOM_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.shape(), " and ",
             b.shape(), " cannot be multiplied (batch sizes or inner sizes differ)");
  Tensor y = empty({a.size(0), a.size(1), b.size(2)}, a.options());
  if (y.numel() > 0) {
    if (a.size(2) == 0)
      backend_for(y.device()).fill(y, 0);
    else
      backend_for(y.device()).matmul(a, b, y);
  }
  if (autograd::needs_grad(a, b)) {
    const bool da = a.requires_grad(), db = b.requires_grad();
    // d(a @ b) = dy @ b^T for a and a^T @ dy for b; transposes are views.
    // An operand that is a transposed view (a Linear's weight.t()) gets its
    // gradient in its own layout, computed transposed: then the gradient of
    // the transpose, and the parameter's .grad(), are contiguous, where they
    // would otherwise be copied once more.
    autograd::record("BmmBackward", {a, b}, y,
                     [sa = db ? autograd::SavedTensor(a) : autograd::SavedTensor(),
                      sb = da ? autograd::SavedTensor(b) : autograd::SavedTensor(), da, db,
                      a_transposed = is_transposed_matrices(a), b_transposed = is_transposed_matrices(b)](
                         const TensorList& g) {
                       Tensor grad_a, grad_b;
                       if (da)
                         grad_a = a_transposed ? bmm(sb.get(), g[0].transpose(1, 2)).transpose(1, 2)
                                               : bmm(g[0], sb.get().transpose(1, 2));
                       if (db)
                         grad_b = b_transposed ? bmm(g[0].transpose(1, 2), sa.get()).transpose(1, 2)
                                               : bmm(sa.get().transpose(1, 2), g[0]);
                       return TensorList{grad_a, grad_b};
                     });
  }
  return y;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  check_matmul_operands("mm", a, b);
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got shapes ", a.shape(),
             " and ", b.shape());
  LOOM_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.shape(), " and ", b.shape(),
             " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
  return bmm(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
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
