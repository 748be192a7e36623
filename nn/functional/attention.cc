// Scaled dot-product attention, two ways:
//  - fused (FlashAttention's algorithm, tensor/backend.h attention): one op
//    each way that never stores the (Tq, Tk) scores; the backward recomputes
//    them from q, k and each row's logsumexp;
//  - composite: two matmuls around attention_softmax (which scales, masks and
//    normalises the scores in one pass each way), every intermediate a tensor.
// set_attention_kernel() picks one, as PyTorch's torch.backends.cuda.enable_*_sdp.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "autograd/node.h"
#include "nn/functional.h"
#include "nn/functional/operands.h"
#include "tensor/autocast.h"
#include "tensor/backend.h"
#include "tensor/flop_counter.h"

namespace loom::nn::functional {
namespace {

std::atomic<AttentionKernel> g_attention_kernel{AttentionKernel::kAuto};
std::atomic<bool> g_deterministic_attention{false};  // PyTorch's default too

bool fused_wanted() {
  switch (attention_kernel()) {
    case AttentionKernel::kComposite: return false;
    case AttentionKernel::kFused: return true;
    case AttentionKernel::kAuto: return true;  // wherever the fused kernels fit (fused_fits)
  }
  return false;
}

// The fused kernels keep each row's logsumexp in float32, float64 for float64.
// The fused kernels' FLOPs under PyTorch's sdpa names and formulas
// (tensor/flop_counter.h): q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv).
void count_attention_flops(bool backward, const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!flops_counted()) return;
  const int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2), d = q.size(3), dv = v.size(3);
  if (backward)
    count_flops("scaled_dot_product_attention_backward", flops::attention_backward(b, h, tq, tk, d, dv));
  else
    count_flops("scaled_dot_product_attention", flops::attention(b, h, tq, tk, d, dv));
}

DType logsumexp_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// Whether the fused kernels take these tensors (else the composite runs).
bool fused_fits(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return false;
  return std::max(q.size(-1), v.size(-1)) <= backend_for(q.device()).attention_max_head_dim();
}

// (..., T, D) as (B, H, T, D) with stride 1 along D: 4-D tensors as they
// are, others with their leading dims as H (a view where the strides allow).
Tensor as_heads(const Tensor& t, DType dtype) {
  Tensor x = t.to(dtype);
  if (x.dim() != 4) x = x.reshape({1, -1, x.size(-2), x.size(-1)});
  return x.stride(3) == 1 || x.size(3) == 1 ? x : x.contiguous();
}

// An uninitialised (B, H, T, D) tensor laid out as `like`: (B, T, H, D) in
// memory when like's heads lie inside its rows (the attention layers' q, k and
// v are such views of one projection), so that the heads' outputs and
// gradients are side by side again without a copy. Else contiguous.
Tensor empty_in_layout_of(const Tensor& like, int64_t last_dim) {
  const int64_t b = like.size(0), h = like.size(1), t = like.size(2);
  if (h > 1 && t > 1 && like.stride(1) < like.stride(2))
    return empty({b, t, h, last_dim}, like.options()).transpose(1, 2);
  return empty({b, h, t, last_dim}, like.options());
}

// Empty dq, dk and dv. When q, k and v are the three thirds of one
// projection's rows ((B, T, 3, H, D) in memory: the attention layers split
// their qkv output so), the gradients are the thirds of one new buffer laid
// out alike, and split's backward takes that buffer as the projection's
// gradient without a copy (tensor/ops/join.cc). Else each as its input, by
// empty_in_layout_of.
TensorList empty_gradients(const Tensor& q, const Tensor& k, const Tensor& v) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3), row = 3 * h * d;
  const bool thirds = k.shape() == q.shape() && v.shape() == q.shape() && k.strides() == q.strides() &&
                      v.strides() == q.strides() && k.storage() == q.storage() && v.storage() == q.storage() &&
                      q.stride(3) == 1 && q.stride(1) == d && q.stride(2) == row && q.stride(0) == t * row &&
                      k.storage_offset() == q.storage_offset() + h * d &&
                      v.storage_offset() == k.storage_offset() + h * d;
  if (!thirds) return {empty_in_layout_of(q, d), empty_in_layout_of(k, k.size(3)), empty_in_layout_of(v, v.size(3))};
  const Tensor buffer = empty({b, t, 3, h, d}, q.options());
  TensorList grads;
  for (int64_t i = 0; i < 3; ++i) grads.push_back(buffer.select(2, i).transpose(1, 2));
  return grads;
}

Tensor fused_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, double scale, bool causal) {
  const DType dtype = promoted_floating_dtype("scaled_dot_product_attention", {q_in, k_in, v_in});
  const Tensor q = as_heads(q_in, dtype), k = as_heads(k_in, dtype), v = as_heads(v_in, dtype);
  const AttentionParams params{.scale = scale, .causal = causal, .deterministic = deterministic_attention()};
  Tensor out = empty_in_layout_of(q, v.size(3));
  Tensor logsumexp = empty({q.size(0), q.size(1), q.size(2)}, {.dtype = logsumexp_dtype(dtype), .device = q.device()});
  backend_for(q.device()).attention(q, k, v, params, out, logsumexp);
  count_attention_flops(false, q, k, v);
  if (autograd::needs_grad({q, k, v}))
    autograd::record(
        "ScaledDotProductAttentionBackward", {q, k, v}, out,
        [params, logsumexp, sq = autograd::SavedTensor(q), sk = autograd::SavedTensor(k),
         sv = autograd::SavedTensor(v), so = autograd::SavedTensor(out)](const TensorList& g) {
          const Tensor &q = sq.get(), &k = sk.get(), &v = sv.get();
          // The kernels read dout as q's dtype with a contiguous last dim.
          Tensor dout = g[0].to(q.dtype());
          if (dout.stride(3) != 1) dout = dout.contiguous();
          TensorList grads = empty_gradients(q, k, v);
          backend_for(q.device()).attention_backward(q, k, v, so.get(), dout, logsumexp, params, grads[0], grads[1],
                                                     grads[2]);
          count_attention_flops(true, q, k, v);
          return grads;
        });
  if (q_in.dim() == 4) return out;
  std::vector<int64_t> shape = q_in.shape().vec();
  shape.back() = v.size(3);
  return out.reshape(shape);
}

// The composite with fewer queries than keys under the causal mask (the
// queries the last tq of the keys' positions), the mask built as a tensor:
// attention_softmax masks square scores only.
Tensor causal_attention_to_longer_keys(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const int64_t tq = q.size(-2), tk = k.size(-2);
  const TensorOptions positions{.dtype = kInt64, .device = q.device()};
  const Tensor query_at = (arange(tq, positions) + static_cast<double>(tk - tq)).reshape({tq, 1});
  const Tensor future = arange(tk, positions).reshape({1, tk}) > query_at;  // (Tq, Tk)
  const Tensor scores = masked_fill(matmul(q, k.transpose(-2, -1)) * scale, future,
                                    -std::numeric_limits<double>::infinity());
  // Exact zeros where the mask is: the softmax's exp leaves denormals there, which slow the product a hundredfold.
  return matmul(masked_fill(softmax(scores, -1), future, 0.0), v);
}

}  // namespace

void set_attention_kernel(AttentionKernel kernel) { g_attention_kernel.store(kernel); }
AttentionKernel attention_kernel() { return g_attention_kernel.load(); }
void set_deterministic_attention(bool deterministic) { g_deterministic_attention.store(deterministic); }
bool deterministic_attention() { return g_deterministic_attention.load(); }

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  LOOM_CHECK(q.defined() && k.defined() && v.defined(), "scaled_dot_product_attention: got an undefined tensor");
  LOOM_CHECK(q.dim() >= 2 && q.dim() == k.dim() && k.dim() == v.dim(),
             "scaled_dot_product_attention: q, k, v must have the same number of dims (..., T, D), got ", q.shape(),
             ", ", k.shape(), ", ", v.shape());
  LOOM_CHECK(q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2),
             "scaled_dot_product_attention: shapes q ", q.shape(), ", k ", k.shape(), ", v ", v.shape(),
             " do not fit together");
  promoted_floating_dtype("scaled_dot_product_attention", {q, k, v});  // one device, floating
  const int64_t tq = q.size(-2), tk = k.size(-2);
  LOOM_CHECK(!causal || tq <= tk, "scaled_dot_product_attention: causal attention needs no more queries than keys ",
             "(the queries are the last of the keys' positions), got ", tq, " and ", tk);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // Leading dims that differ broadcast, which only the composite does.
  const bool same_batch = std::equal(q.shape().begin(), q.shape().end() - 2, k.shape().begin()) &&
                          std::equal(q.shape().begin(), q.shape().end() - 2, v.shape().begin());
  if (same_batch && fused_wanted() && fused_fits(q, k, v)) {
    if (autocast_wants_low({q, k, v}))
      return fused_attention(autocast_to_low(q), autocast_to_low(k), autocast_to_low(v), scale, causal);
    return fused_attention(q, k, v, scale, causal);
  }
  if (causal && tq < tk) return causal_attention_to_longer_keys(q, k, v, scale);
  // att: (..., Tq, Tk), scaled, masked to the past when causal, and normalised in one pass.
  return matmul(attention_softmax(matmul(q, k.transpose(-2, -1)), scale, causal), v);
}

namespace {

// The checks attention_block and its backward share: (B, H, T, D) tensors of
// one floating dtype that the fused kernels take. Returns their AttentionParams.
AttentionParams block_params(const char* name, const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  LOOM_CHECK(q.defined() && k.defined() && v.defined(), name, ": got an undefined tensor");
  LOOM_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(3) == k.size(3) && k.size(2) == v.size(2) &&
                 std::equal(q.shape().begin(), q.shape().begin() + 2, k.shape().begin()) &&
                 std::equal(q.shape().begin(), q.shape().begin() + 2, v.shape().begin()),
             name, ": expected q (B, H, Tq, D), k (B, H, Tk, D) and v (B, H, Tk, Dv), got ", q.shape(), ", ",
             k.shape(), ", ", v.shape());
  LOOM_CHECK(q.dtype() == k.dtype() && k.dtype() == v.dtype(), name, ": q, k and v must share a dtype, got ",
             q.dtype(), ", ", k.dtype(), ", ", v.dtype());
  promoted_floating_dtype(name, {q, k, v});  // one device, floating
  LOOM_CHECK(!causal || q.size(2) <= k.size(2), name, ": causal attention needs no more queries than keys, got ",
             q.size(2), " and ", k.size(2));
  LOOM_CHECK(fused_fits(q, k, v), name, ": the fused kernels on ", q.device(), " do not take q ", q.shape(), ", k ",
             k.shape(), ", v ", v.shape());
  return {.scale = 1.0 / std::sqrt(static_cast<double>(q.size(3))), .causal = causal,
          .deterministic = deterministic_attention()};
}

// The kernels take any strides but a dense last dim.
Tensor dense_rows(const Tensor& t) { return t.stride(3) == 1 || t.size(3) == 1 ? t : t.contiguous(); }

}  // namespace

AttentionBlock attention_block(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal) {
  const AttentionParams params = block_params("attention_block", q_in, k_in, v_in, causal);
  const Tensor q = dense_rows(q_in), k = dense_rows(k_in), v = dense_rows(v_in);
  AttentionBlock block{empty({q.size(0), q.size(1), q.size(2), v.size(3)}, q.options()),
                       empty({q.size(0), q.size(1), q.size(2)},
                             {.dtype = logsumexp_dtype(q.dtype()), .device = q.device()})};
  backend_for(q.device()).attention(q, k, v, params, block.out, block.logsumexp);
  count_attention_flops(false, q, k, v);
  return block;
}

TensorList attention_block_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out,
                                    const Tensor& logsumexp, const Tensor& dout, bool causal) {
  const AttentionParams params = block_params("attention_block_backward", q_in, k_in, v_in, causal);
  const Shape out_shape{q_in.size(0), q_in.size(1), q_in.size(2), v_in.size(3)};
  LOOM_CHECK(out.shape() == out_shape && dout.shape() == out_shape &&
                 logsumexp.shape() == Shape({out_shape[0], out_shape[1], out_shape[2]}),
             "attention_block_backward: expected out and dout ", out_shape, " and logsumexp (B, H, Tq), got ",
             out.shape(), ", ", dout.shape(), ", ", logsumexp.shape());
  const Tensor q = dense_rows(q_in), k = dense_rows(k_in), v = dense_rows(v_in);
  TensorList grads{empty(q.shape(), q.options()), empty(k.shape(), k.options()), empty(v.shape(), v.options())};
  const Tensor row_logsumexp = logsumexp.to(logsumexp_dtype(q.dtype())).contiguous();
  backend_for(q.device()).attention_backward(q, k, v, dense_rows(out.to(q.dtype())), dense_rows(dout.to(q.dtype())),
                                             row_logsumexp, params, grads[0], grads[1], grads[2]);
  count_attention_flops(true, q, k, v);
  return grads;
}

}  // namespace loom::nn::functional
