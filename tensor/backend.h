// The kernels a device backend provides: loom's small primitive set.
//
// Public ops (tensor/ops/) check their arguments once, allocate outputs and
// call one of these for the tensors' device. Everything else (cat, var,
// cross-entropy, ...) is composed from them. Kernels trust their arguments:
//  - outputs are allocated by the caller, usually contiguous;
//  - elementwise inputs arrive already broadcast to the output's shape
//    (expanded views with stride 0), with any strides;
//  - all tensors of one call are on the backend's device.
// The CPU backend (tensor/cpu/) is always built; the CUDA backend
// (tensor/cuda/) registers itself when it is linked in.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "tensor/allocator.h"
#include "tensor/float8_rounding.h"
#include "tensor/generator.h"
#include "tensor/tensor.h"

namespace loom {

enum class UnaryOp {
  Neg, Abs, Square, Reciprocal, Sign,           // numeric
  Exp, Log, Sqrt, Rsqrt, Sin, Cos,              // floating
  Tanh, Sigmoid, Relu, GeluTanh, GeluErf,       // activations
  PowScalar,                                    // x ** alpha
  Clamp,                                        // min(max(x, alpha), beta)
  LogicalNot,                                   // bool
};

enum class BinaryOp {
  Add, Sub, Mul, Div,       // a + alpha*b for Add and Sub: a - alpha*b
  Pow, Maximum, Minimum,
  Lerp,                     // a + alpha*(b - a)
  Eq, Ne, Lt, Le, Gt, Ge,   // output bool
  LogicalAnd, LogicalOr,    // bool inputs and output
  // Fused activation gradients: a is the incoming gradient dy, b the saved
  // output (Relu, Tanh, Sigmoid) or input (Gelu) of the forward op.
  ReluBackward, TanhBackward, SigmoidBackward, GeluTanhBackward, GeluErfBackward,
};

enum class TernaryOp {
  Where,    // a ? b : c (a is bool)
  Addcmul,  // a + alpha*b*c
  Addcdiv,  // a + alpha*b/c
};

enum class ReduceOp { Sum, Max, Min };
enum class ArgReduceOp { ArgMax, ArgMin };
enum class RandomOp { Uniform, Normal, RandInt, Bernoulli };

bool is_comparison(BinaryOp op);

// What a softmax computes along its dim: softmax (or log-softmax) of
// scale * x (scale > 0). With `causal` (softmax only, not log; the last dim
// of a contiguous (..., T, T) tensor), row q counts only its elements
// k <= q and outputs 0 for the rest: attention's scale and causal mask,
// fused into its softmax. Elements are rows of T, so row r is query r % T.
struct SoftmaxParams {
  bool log = false;
  double scale = 1;
  bool causal = false;
};

// Fused attention (tensor/backend.h attention): softmax(scale q k^T) v, and
// with `causal` the queries are the last Tq tokens of the keys' sequence:
// query i attends only to keys j <= i + (Tk - Tq) (needs Tq <= Tk).
struct AttentionParams {
  double scale = 1;
  bool causal = false;
  // false lets the backward sum dq's pieces in whatever order they come
  // (CUDA, float32 and float64: atomics, one kernel fewer); the last bits
  // of dq may then differ between runs. The CPU's is deterministic either way.
  bool deterministic = true;
};

// Convolution geometry (NCHW), as torch.nn.Conv2d's arguments.
struct Conv2dParams {
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  // A ReLU fused into the forward's output pass: out = max(0, conv + bias).
  // (nn::Sequential fuses a Conv2d followed by a ReLU; see conv2d_relu.)
  bool relu = false;
};

// Pooling window (NCHW); padding counts as -inf for max and as 0 (included
// in the divisor, PyTorch's count_include_pad=True) for average.
struct Pool2dParams {
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
};

// What a capturable optimizer's step reads on its device rather than from
// the host, so that a CUDA graph's replays step on (tensor/device_graph.h):
// `scalars` (float64, on the parameters' device) holds [0] the learning
// rate and [1] the step count before this step, which the step increments
// where `advance` (an optimizer that steps a device's parameters in two
// launches advances it in one); Adam's step also writes [2] and [3], its bias
// corrections. Where `found_inf` is set (GradScaler's flag, on the device) and
// not 0, the step changes nothing, the count included.
struct DeviceStepScalars {
  double* scalars = nullptr;
  const float* found_inf = nullptr;
  bool advance = true;
};

// One Adam/AdamW step (PyTorch's formulas); `step` counts from 1. With
// `device.scalars` set, lr and step are taken from there instead.
struct AdamParams {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  int64_t step = 1;
  DeviceStepScalars device{};  // {}: designated initializers may leave it out without -Wextra warnings
};

// One SGD step; momentum buffers are (re)started from the gradient when
// `first_step` (as PyTorch does on its first step). With `device.scalars`
// set, lr is taken from there instead.
struct SgdParams {
  double lr = 1e-2, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = true;
  DeviceStepScalars device{};  // {}: designated initializers may leave it out without -Wextra warnings
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator(int device_index) = 0;
  virtual int device_count() = 0;
  // Blocks the host until all work queued on the device is done.
  virtual void synchronize(int device_index) = 0;
  // Page-locked host memory for asynchronous host-to-device copies, or null
  // when the backend has none (the CPU's). empty_pinned() uses it.
  virtual Allocator* pinned_host_allocator() { return nullptr; }

  // ---- queues: device-side order between threads (tensor/device_queue.h) ----
  // A thread's work on a device goes on its current queue (CUDA: its current
  // stream). The CPU has none: its work is done when the call returns, so
  // these default to doing nothing.
  struct QueueObject {  // a queue, a point in one, or a scope using one
    virtual ~QueueObject() = default;
  };
  virtual std::shared_ptr<QueueObject> new_queue(int /*device_index*/) { return nullptr; }
  // Until the returned object dies, the calling thread's work on the device goes on `queue`.
  virtual std::shared_ptr<QueueObject> enter_queue(const QueueObject& /*queue*/) { return nullptr; }
  // The current end of the calling thread's queue; `timed`: one that
  // seconds_between() can measure from (it costs a little on the GPU).
  virtual std::shared_ptr<QueueObject> mark_queue(int /*device_index*/, bool /*timed*/ = false) { return nullptr; }
  // Seconds of the device's time between two timed marks, waiting (host)
  // until `to` is reached.
  virtual double seconds_between(const QueueObject& /*from*/, const QueueObject& /*to*/) { return 0; }
  // The calling thread's queue waits until `mark` is reached (no host wait).
  virtual void wait_for_mark(const QueueObject& /*mark*/, int /*device_index*/) {}
  // `t` is used by work queued so far on the calling thread's queue: its
  // memory is not reused before that work is done.
  virtual void used_on_current_queue(const Tensor& /*t*/) {}

  // ---- graphs: a device's work captured once, replayed (tensor/device_graph.h) ----
  // Runs `work` on the calling thread with the device's work recorded into a
  // graph instead of run, and returns the graph. The CPU has none: it fails.
  virtual std::shared_ptr<QueueObject> capture_graph(int device_index, const std::function<void()>& work);
  // Runs a captured graph's work again, on the calling thread's current queue.
  virtual void replay_graph(QueueObject& graph);

  // ---- elementwise ----
  virtual void unary(UnaryOp op, const Tensor& a, const Tensor& out, double alpha,
                     double beta) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                      double alpha) = 0;
  virtual void ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                       const Tensor& out, double alpha) = 0;
  // An activation and its derivative in one pass, where they share their
  // work (GeluTanh: one exponential for both): y = op(x), dydx = op'(x), all
  // three contiguous and of one shape. The backward then multiplies by dydx
  // instead of computing the activation's inner function again. Backends
  // without such a kernel for `op` and `dtype` say so, and the caller falls
  // back to unary and a backward from x.
  virtual bool has_unary_with_derivative(UnaryOp /*op*/, DType /*dtype*/) const { return false; }
  virtual void unary_with_derivative(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dydx);
  // dst = src converted to dst's dtype; same shape, any strides. One of them
  // may be on another device type (the CUDA backend copies to and from CPU).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& out, double value) = 0;
  virtual void arange(const Tensor& out, double start, double step) = 0;  // contiguous out
  // Contiguous out, element i from (draw.seed, draw.offset, i); a draw with
  // a device_state (generator.h) comes only to a backend that captures graphs.
  virtual void random(RandomOp op, const Tensor& out, double a, double b, const Draw& draw) = 0;

  // ---- reductions ----
  // `out` has a's rank, with size 1 in every reduced dim (keepdim shape).
  virtual void reduce(ReduceOp op, const Tensor& a, const Tensor& out) = 0;
  // Index (int64) of the first max/min along `dim`; out has size 1 in `dim`.
  virtual void arg_reduce(ArgReduceOp op, const Tensor& a, int dim, const Tensor& out) = 0;
  // Softmax (or log-softmax) along `dim` of p.scale * a; contiguous in and out.
  virtual void softmax(const Tensor& a, int dim, const SoftmaxParams& p, const Tensor& out) = 0;
  // dx from y (the softmax output) and dy; contiguous, same shape.
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, int dim, const SoftmaxParams& p,
                                const Tensor& dx) = 0;

  // ---- linear algebra ----
  // out[b] = a[b] @ b[b] + bias: a (B, M, K), b (B, K, N), out (B, M, N)
  // contiguous; bias (N) contiguous, of out's dtype, added to every row
  // (undefined: adds nothing). a and b may have any strides (transposed
  // views, stride-0 batch dims).
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) = 0;

  // Products by one right operand, many times (an RNN's recurrent weight,
  // once a step), prepared once:
  //   std::unique_ptr<PreparedProduct> by_w = backend.prepare_product(w);  // w (K, N)
  //   by_w->run(h, out);                                                  // out = h @ w
  // run takes a (M, K), with any strides, and writes out (M, N), contiguous,
  // both of w's dtype and device. It may be called from several threads at
  // once, into disjoint outputs. The default runs matmul; the CPU packs a
  // float32 w into its micro-kernel's panels once, so w's values are the
  // ones it had when prepared (change w, prepare again), and runs each
  // product on the calling thread (split the rows across threads with
  // for_row_blocks, as the LSTM layer does).
  class PreparedProduct {
   public:
    virtual ~PreparedProduct() = default;
    virtual void run(const Tensor& a, const Tensor& out) const = 0;
  };
  virtual std::unique_ptr<PreparedProduct> prepare_product(const Tensor& b);

  // ---- indexing (indices int64, checked against the sizes by the kernel) ----
  // out = a.index_select(dim, index); contiguous a and out.
  virtual void index_select(const Tensor& a, int dim, const Tensor& index, const Tensor& out) = 0;
  // out.index_select(dim, index) += src; contiguous out and src.
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // out[i][j] = a[index[i][j]][j] (dim 0), PyTorch's gather; out has index's shape.
  virtual void gather(const Tensor& a, int dim, const Tensor& index, const Tensor& out) = 0;
  // out[index[i][j]][j] += src[i][j] (dim 0), PyTorch's scatter_add_.
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;

  // ---- convolution, NCHW, all tensors contiguous ----
  // out (N, C_out, H_out, W_out) = x (N, C_in, H, W) * w (C_out, C_in / groups, kH, kW) + bias (C_out),
  // where an undefined bias adds nothing; max(0, .) of that when p.relu.
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
                      const Tensor& out) = 0;
  // The backward passes take `relu_out`, the forward's output, when it fused
  // a ReLU (else undefined): dy then counts only where relu_out > 0.
  // dx = d(out)/dx applied to dy (dx is overwritten).
  virtual void conv2d_backward_input(const Tensor& dy, const Tensor& relu_out, const Tensor& w,
                                     const Conv2dParams& p, const Tensor& dx) = 0;
  // dw = d(out)/dw applied to dy, and dbias = dy summed over N, H and W
  // when dbias is defined (both overwritten).
  virtual void conv2d_backward_weight(const Tensor& dy, const Tensor& relu_out, const Tensor& x,
                                      const Conv2dParams& p, const Tensor& dw, const Tensor& dbias) = 0;

  // ---- pooling, NCHW, contiguous ----
  // indices (int64, out's shape): the flat position h * W + w of each max in its input plane.
  virtual void max_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out,
                          const Tensor& indices) = 0;
  // dx (overwritten) gets dy added at the recorded positions.
  virtual void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) = 0;
  virtual void avg_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) = 0;
  virtual void avg_pool2d_backward(const Tensor& dy, const Pool2dParams& p, const Tensor& dx) = 0;
  // Output window i covers input rows [floor(i H / H_out), ceil((i + 1) H / H_out)).
  virtual void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) = 0;

  // ---- layer norm over the last dim of a contiguous (rows, C) tensor ----
  // y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + eps) (population
  // variance); weight and bias may be undefined (no affine). mean and rstd
  // (rows) are written for the backward, in x's dtype, or float32 when x is
  // bfloat16 or float16.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& y, const Tensor& mean, const Tensor& rstd) = 0;
  // dx, dweight and dbias (overwritten) when defined (a zero-bubble pipeline
  // asks for dx first and the other two later).
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                   const Tensor& dweight, const Tensor& dbias) = 0;

  // ---- work whose rows never meet (an LSTM's batch rows through the recurrence) ----
  // Runs fn(begin, end) over blocks that cover [0, rows) once each. Blocks may
  // run at the same time, so fn must touch only its own rows' data; a block
  // of r rows costs about r x work_per_row operations. The CPU gives each
  // thread a block when a block is worth a thread: a loop of small products
  // then runs on one thread a block, with no barrier between its steps. The
  // default runs fn(0, rows): a GPU's kernels are parallel already.
  virtual void for_row_blocks(int64_t rows, int64_t /*work_per_row*/, const std::function<void(int64_t, int64_t)>& fn) {
    if (rows > 0) fn(0, rows);
  }

  // ---- LSTM cell: the pointwise part of one step, PyTorch's gate order i, f, g, o ----
  // input_gates and hidden_gates (B, 4H) are the step's two pre-activation
  // products; c_prev, h and c are (B, H). Writes
  //   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of (input_gates + hidden_gates)
  //   c = f c_prev + i g,   h = o tanh(c)
  // and `activations` (B, 4H) = [i, f, g, o], kept for the backward. All contiguous.
  virtual void lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev,
                         const Tensor& h, const Tensor& c, const Tensor& activations) = 0;
  // From the gradients dh and dc reaching h and c: dgates (B, 4H), the
  // gradient of both pre-activation inputs, and dc_prev (B, H). All contiguous.
  virtual void lstm_cell_backward(const Tensor& dh, const Tensor& dc, const Tensor& activations,
                                  const Tensor& c_prev, const Tensor& c, const Tensor& dgates,
                                  const Tensor& dc_prev) = 0;

  // ---- attention, fused (FlashAttention's algorithm): the (Tq, Tk) scores are never stored ----
  // q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv) and out (B, H, Tq, Dv)
  // share one dtype and may have any strides with stride 1 along the last dim;
  // Tq, Tk, D, Dv >= 1. Writes out = softmax(p.scale q k^T) v, row by row (the
  // causal mask as AttentionParams says), and logsumexp (B, H, Tq),
  // contiguous, float64 for float64 and float32 otherwise: the log of each
  // row's sum of exp(p.scale q.k), kept for the backward.
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p,
                         const Tensor& out, const Tensor& logsumexp) = 0;
  // The largest D and Dv attention takes (callers run the composite beyond it).
  virtual int64_t attention_max_head_dim() const { return INT64_MAX; }
  // dq, dk, dv (q's, k's and v's shapes, any strides with stride 1 along the
  // last dim, overwritten) from dout (out's shape, likewise), recomputing the
  // attention weights from q, k and logsumexp.
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& dout, const Tensor& logsumexp, const AttentionParams& p,
                                  const Tensor& dq, const Tensor& dk, const Tensor& dv) = 0;

  // ---- float8 (tensor/float8.h): the casts and the product of float8 training ----
  // x (M, K) contiguous, floating; amax () float32 = max |x|. Writes
  // inv_scale () float32 = 1 / scale with scale = float8::scale_for_amax(amax),
  // bits (M, K) uint8 = float8::encode(float(x) * scale), and the same codes
  // transposed into bits_t (K, M) when it is defined. Outputs contiguous.
  virtual void float8_cast(const Tensor& x, const Tensor& amax, Float8Format format, const Tensor& bits,
                           const Tensor& bits_t, const Tensor& inv_scale) = 0;
  // out (M, N) = a_inv_scale * b_inv_scale * (decode(a) (M, K) @ decode(b) (N, K)^T) + bias,
  // accumulated in float32 and rounded into out (float32, bfloat16 or float16,
  // contiguous). a and b: contiguous uint8 codes, 16-byte aligned, not both
  // e5m2; the inverse scales () float32; bias (N) of out's dtype, contiguous
  // and 16-byte aligned, given only for 16-bit outputs (else undefined). M,
  // N and K are multiples of 16.
  virtual void float8_matmul(const Tensor& a, Float8Format a_format, const Tensor& a_inv_scale, const Tensor& b,
                             Float8Format b_format, const Tensor& b_inv_scale, const Tensor& bias,
                             const Tensor& out) = 0;

  // ---- fused optimizer steps over many tensors at once, in place ----
  virtual void adam_step(const TensorList& params, const TensorList& grads, const TensorList& exp_avg,
                         const TensorList& exp_avg_sq, const AdamParams& p) = 0;
  // momentum_buffers is empty when p.momentum == 0.
  virtual void sgd_step(const TensorList& params, const TensorList& grads,
                        const TensorList& momentum_buffers, const SgdParams& p) = 0;
  // GradScaler's unscale and check (PyTorch's _amp_foreach_non_finite_check_and_unscale_):
  // each of `grads` (contiguous, floating, on found_inf's device) *= inv_scale,
  // in its compute type and rounded once; found_inf (one float32 element) is
  // set to 1 if any result is inf or NaN, and otherwise left as it is. Nothing
  // is read back to the host. Where `device_scale` is defined (one float32
  // element on the device: a capturable GradScaler's), inv_scale is 1 over it,
  // read when the kernel runs.
  virtual void unscale_and_check_finite(const TensorList& grads, double inv_scale, const Tensor& found_inf,
                                        const Tensor& device_scale = Tensor()) = 0;
  // A capturable GradScaler's update (PyTorch's _amp_update_scale_), on the
  // device; scale, good_steps and found_inf are one float32 element each.
  // found_inf not 0: scale *= backoff_factor, good_steps = 0. Otherwise
  // good_steps += 1, and at growth_interval scale *= growth_factor (if that
  // stays finite) and good_steps = 0.
  virtual void update_grad_scale(const Tensor& scale, const Tensor& good_steps, const Tensor& found_inf,
                                 double growth_factor, double backoff_factor, int growth_interval) = 0;
};

// unscale_and_check_finite's and update_grad_scale's argument checks, shared by the backends.
void check_unscale_arguments(const TensorList& grads, const Tensor& found_inf, const Tensor& device_scale);
void check_update_scale_arguments(const Tensor& scale, const Tensor& good_steps, const Tensor& found_inf);
// PreparedProduct::run's argument checks against its right operand b.
void check_prepared_product_run(const Tensor& a, const Tensor& b, const Tensor& out);

// Output size of a convolution or pooling window along one dim.
int64_t window_output_size(int64_t input, int kernel, int stride, int pad, int dilation);

Backend& backend_for(DeviceType type);
inline Backend& backend_for(Device device) { return backend_for(device.type()); }
// Called once by a backend as it is loaded.
void register_backend(DeviceType type, Backend* backend);
bool has_backend(DeviceType type);

// dst = src (same shape) across any pair of devices, converting the dtype;
// picks the backend that can reach both. No autograd.
void copy_data(const Tensor& src, const Tensor& dst);

// Waits for queued work on `device` (a no-op on the CPU).
void synchronize(Device device);

}  // namespace loom
