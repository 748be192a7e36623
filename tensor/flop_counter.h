// FlopCounter: counts the floating-point operations of the matrix products
// that run while it is active, by op, as PyTorch's FlopCounterMode does.
//
//   FlopCounter counter;
//   {
//     FlopCounter::Scope scope(counter);        // this thread's ops count from here
//     model->forward(x).sum().backward();
//   }
//   counter.total();                            // FLOPs of the forward and the backward
//   counter.by_op();                            // {"addmm": ..., "mm": ..., "convolution": ...}
//
// Counted where an op calls its backend (docs/architecture.md, "One dispatch
// point per op"): mm, bmm and addmm (tensor/ops/matmul.cc), _scaled_mm
// (float8), convolution and convolution_backward (nn/functional/conv.cc),
// scaled_dot_product_attention and its _backward (the fused kernels), and
// the products inside the fused LSTM layer (counted as mm). A backward's
// products are counted by the op that computes them: a Linear's dx and dw
// are two mm calls, a convolution's one convolution_backward, the fused
// attention's one scaled_dot_product_attention_backward. Elementwise ops,
// reductions, softmax and the optimizer count nothing, as in PyTorch.
//
// A multiply-add is 2 FLOPs, and every formula is PyTorch's
// (torch/utils/flop_counter.py), so counts compare across frameworks:
//   mm (m, k) @ (k, n)                    2 m k n (addmm's bias is not counted)
//   bmm (b, m, k) @ (b, k, n)             2 b m k n
//   convolution                           2 N C_out H_out W_out (C_in / groups) kH kW
//   convolution_backward                  the same for dx, and again for dw (each computed one)
//   attention q (B,H,Tq,D), v (..,Tk,Dv)  2 B H Tq Tk (D + Dv): the two products
//   attention backward                    2 B H Tq Tk (3 D + 2 Dv): the scores recomputed,
//                                         then dP, dv, dq and dk
// Attention counts the full Tq x Tk products also when causal (PyTorch:
// "We aren't accounting for causal attention here"). The composite attention
// (bmm, softmax, bmm) counts its bmm calls instead: the same forward, and a
// backward of four products, without the fused kernel's recomputation.
// One difference: for a grouped convolution PyTorch counts dw as if it were
// ungrouped (groups times too many); loom counts what the kernel computes.
// Work repeated on purpose counts again: activation checkpointing's recomputed
// forward, each pipeline stage's, each data-parallel replica's own batch.
//
// The active counter is per thread (a thread-local pointer, as PyTorch's
// dispatch modes are), so that ranks running as threads count apart; one
// counter may be given to scopes on several threads, and then sums them.
// Scopes nest: an inner scope's ops count in the outer counters too. With no
// scope active an op pays one thread-local load. A CUDA graph's replays do
// not pass the dispatch point: count a step run eagerly.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace loom {

class FlopCounter {
 public:
  // Makes `counter` this thread's active counter until the scope ends.
  class Scope {
   public:
    explicit Scope(FlopCounter& counter);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    friend void count_flops(const char* op, int64_t flops);
    FlopCounter* counter_;
    Scope* outer_;
  };

  FlopCounter() = default;
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  int64_t total() const;
  // FLOPs by op name (PyTorch's aten names: "mm", "addmm", "bmm", "convolution", ...).
  std::map<std::string, int64_t> by_op() const;
  // One op's FLOPs; 0 for an op that did not run.
  int64_t get(const std::string& op) const;
  void reset();
  // One line per op and the total, in GFLOP, for a log.
  std::string table() const;

 private:
  friend void count_flops(const char* op, int64_t flops);
  void add(const char* op, int64_t flops);
  mutable std::mutex mutex_;  // scopes on several threads may share a counter
  std::map<std::string, int64_t> counts_;
};

namespace detail {
extern thread_local FlopCounter::Scope* t_flop_scope;
}  // namespace detail

// Whether this thread counts FLOPs now: the one check an op makes.
inline bool flops_counted() { return detail::t_flop_scope != nullptr; }

// Adds `flops` under `op` to this thread's active counters; nothing when none is.
// The ops that dispatch products call it, as does a fused kernel whose
// products do not pass through them (the LSTM layer's).
void count_flops(const char* op, int64_t flops);

// PyTorch's formulas (torch/utils/flop_counter.py), a multiply-add 2 FLOPs.
namespace flops {

constexpr int64_t bmm(int64_t batch, int64_t m, int64_t k, int64_t n) { return 2 * batch * m * k * n; }
constexpr int64_t mm(int64_t m, int64_t k, int64_t n) { return bmm(1, m, k, n); }
// Output (n, c_out, h_out, w_out); each output element takes (c_in / groups) kh kw multiply-adds.
constexpr int64_t conv2d(int64_t n, int64_t c_out, int64_t h_out, int64_t w_out, int64_t c_in_per_group,
                         int64_t kh, int64_t kw) {
  return 2 * n * c_out * h_out * w_out * c_in_per_group * kh * kw;
}
// q (b, h, tq, d), k (b, h, tk, d), v (b, h, tk, dv).
constexpr int64_t attention(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t d, int64_t dv) {
  return bmm(b * h, tq, d, tk) + bmm(b * h, tq, tk, dv);
}
constexpr int64_t attention_backward(int64_t b, int64_t h, int64_t tq, int64_t tk, int64_t d, int64_t dv) {
  return bmm(b * h, tq, d, tk)      // the scores, recomputed
         + bmm(b * h, tq, dv, tk)   // dP = dout v^T
         + bmm(b * h, tk, tq, dv)   // dv = P^T dout
         + bmm(b * h, tq, tk, d)    // dq = dS k
         + bmm(b * h, d, tq, tk);   // dk = (q^T dS)^T
}

}  // namespace flops
}  // namespace loom
