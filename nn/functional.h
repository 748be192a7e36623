// nn::functional: the stateless layer ops (PyTorch's torch.nn.functional).
// Layers (nn/*.h) hold parameters and call these.
//
//   Tensor y = functional::conv2d(x, w, b, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1});
//   Tensor loss = functional::cross_entropy(logits, labels);
#pragma once

#include <utility>
#include <vector>

#include "tensor/backend.h"
#include "tensor/generator.h"
#include "tensor/ops.h"

namespace loom::nn::functional {

// x (..., in) @ weight (out, in)^T + bias (out); bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// linear with its three products in float8 (float8_linear.cc): x and weight
// cast to e4m3, the output's gradient to e5m2, each with a tensorwise scale
// (tensor/float8.h). The output is in the autocast dtype, else x's; the
// gradients in x's and the weight's dtypes. The rows of x (its leading dims
// together), in and out must be multiples of 16.
Tensor float8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// x (N, C_in, H, W), weight (C_out, C_in / groups, kH, kW), bias (C_out) or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv2dParams params = {});
// relu(conv2d(x, weight, bias)) with the ReLU fused into the convolution's
// passes (the activation is not read or written on its own); the same values
// and gradients.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), Conv2dParams params = {});

Tensor max_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& params);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// Normalises over the trailing dims given by normalized_shape; weight and bias
// (of that shape) may be undefined.
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

// x (N, C, ...). In training, normalises with the batch statistics and
// updates running_mean / running_var in place (momentum as in PyTorch, the
// running variance unbiased); in evaluation, uses the running statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);

// Zeroes each element with probability p in training and scales the rest by
// 1 / (1 - p); the identity in evaluation.
Tensor dropout(const Tensor& x, double p, bool training, Generator* generator = nullptr);

// Rows of weight (num, dim) picked by int64 indices of any shape: (..., dim).
Tensor embedding(const Tensor& indices, const Tensor& weight);

// q, k, v (..., T, D): softmax(q k^T / sqrt(D), masked to the past when causal) v.
// Causal with fewer queries than keys: the queries are the last Tq of the
// keys' positions (FlashAttention's bottom-right alignment), so query i sees
// keys j <= i + Tk - Tq.
// Runs the kernel set_attention_kernel() names; under autocast, in its dtype.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);

// The fused attention's two halves without autograd, for attention computed
// block by block over keys that arrive a block at a time (ring attention,
// parallel/context_parallel/ring_attention.h). q, k, v (B, H, T, D) of one
// floating dtype; causal as above. attention_block returns the block's
// output and each query's logsumexp of its scaled scores, (B, H, Tq) in
// float32 (float64 for float64): two blocks' outputs merge by their
// logsumexps into the output over both. attention_block_backward returns
// dq, dk, dv for one block given `out`, `logsumexp` and `dout` of the
// *whole* attention (every block merged): the weights it recomputes from
// them are the block's share of the whole softmax, so the blocks' dq sum to
// the whole's and each block's dk, dv are its keys' and values' gradients.
// Both run the fused kernels and refuse what those do not take.
struct AttentionBlock {
  Tensor out, logsumexp;
};
AttentionBlock attention_block(const Tensor& q, const Tensor& k, const Tensor& v, bool causal);
TensorList attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& logsumexp, const Tensor& dout, bool causal);

// Which kernel scaled_dot_product_attention runs, process-wide (PyTorch's
// torch.backends.cuda.enable_flash_sdp / enable_math_sdp).
enum class AttentionKernel {
  kAuto,       // fused wherever the kernels take the call, else the composite (as PyTorch picks)
  kFused,      // one op each way, the (T, T) scores never stored (FlashAttention's algorithm)
  kComposite,  // matmul, attention_softmax, matmul: the scores and weights stored for backward
};
// Inputs the fused kernels do not take run the composite whatever the
// setting: broadcast leading dims, empty tensors, and on CUDA head dims over 128.
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();

// Whether the fused attention's backward gives the same bits on every run
// (PyTorch: torch.use_deterministic_algorithms), process-wide. On CUDA in
// float32 and float64, false runs one kernel that computes the attention
// weights once and adds each key tile's share of dq with atomics
// (FlashAttention-2's backward), instead of a second kernel that computes
// them again for dq. false by default, as in PyTorch: on an H200 the gpt
// step took 31.6 ms with atomics, 32.6 without (docs/benchmarks.md).
// The CPU and the 16-bit tensor-core kernels are deterministic either way.
void set_deterministic_attention(bool deterministic);
bool deterministic_attention();

// The kernel for a scope, the previous one restored at its end (PyTorch's
// torch.nn.attention.sdpa_kernel); process-wide, as the setting is.
class AttentionKernelGuard {
 public:
  explicit AttentionKernelGuard(AttentionKernel kernel) : previous_(attention_kernel()) { set_attention_kernel(kernel); }
  ~AttentionKernelGuard() { set_attention_kernel(previous_); }
  AttentionKernelGuard(const AttentionKernelGuard&) = delete;
  AttentionKernelGuard& operator=(const AttentionKernelGuard&) = delete;

 private:
  AttentionKernel previous_;
};

// The deterministic-attention setting for a scope, the previous one restored
// at its end; process-wide, as the setting is.
class DeterministicAttentionGuard {
 public:
  explicit DeterministicAttentionGuard(bool deterministic) : previous_(deterministic_attention()) {
    set_deterministic_attention(deterministic);
  }
  ~DeterministicAttentionGuard() { set_deterministic_attention(previous_); }
  DeterministicAttentionGuard(const DeterministicAttentionGuard&) = delete;
  DeterministicAttentionGuard& operator=(const DeterministicAttentionGuard&) = delete;

 private:
  bool previous_;
};

// One LSTM step's pointwise part, fused (PyTorch's _thnn_fused_lstm_cell):
// input_gates and hidden_gates (B, 4H) are x W_ih^T + b_ih and h W_hh^T + b_hh
// (gate order i, f, g, o), c_prev (B, H). Returns {h, c}:
//   c = sigmoid(f) c_prev + sigmoid(i) tanh(g),   h = sigmoid(o) tanh(c).
// The three inputs are brought to their promoted dtype.
std::pair<Tensor, Tensor> lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev);

// One LSTM layer over a sequence, the recurrence as one op: input_gates
// (T >= 1, B, 4H) = x W_ih^T + b_ih + b_hh for every step, weight_hh (4H, H),
// h0 and c0 (B, H). Returns every step's h (T, B, H) and the last h and c
// (B, H). Forward and backward are loops of two kernels per step, and
// weight_hh's gradient is one product over all steps. The four inputs are
// brought to their promoted dtype.
struct LstmLayerOutput {
  Tensor output, h, c;
};
LstmLayerOutput lstm_layer(const Tensor& input_gates, const Tensor& weight_hh, const Tensor& h0, const Tensor& c0);

enum class Reduction { Mean, Sum, None };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;  // targets equal to it contribute nothing
  Reduction reduction = Reduction::Mean;
};

// logits (N, C), targets (N) int64 class indices. The log-softmax and the
// negative log-likelihood are fused into one numerically stable expression.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});
// log_probs (N, C), targets (N): -log_probs[i, targets[i]], reduced.
Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, const CrossEntropyOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

}  // namespace loom::nn::functional
