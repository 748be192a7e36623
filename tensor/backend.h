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

#include "tensor/allocator.h"
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

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Allocator& allocator(int device_index) = 0;
  virtual int device_count() = 0;
  // Blocks the host until all work queued on the device is done.
  virtual void synchronize(int device_index) = 0;

  // ---- elementwise ----
  virtual void unary(UnaryOp op, const Tensor& a, const Tensor& out, double alpha,
                     double beta) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                      double alpha) = 0;
  virtual void ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c,
                       const Tensor& out, double alpha) = 0;
  // dst = src converted to dst's dtype; same shape, any strides. One of them
  // may be on another device type (the CUDA backend copies to and from CPU).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& out, double value) = 0;
  virtual void arange(const Tensor& out, double start, double step) = 0;  // contiguous out
  virtual void random(RandomOp op, const Tensor& out, double a, double b, uint64_t seed,
                      uint64_t offset) = 0;  // contiguous out

  // ---- reductions ----
  // `out` has a's rank, with size 1 in every reduced dim (keepdim shape).
  virtual void reduce(ReduceOp op, const Tensor& a, const Tensor& out) = 0;
  // Index (int64) of the first max/min along `dim`; out has size 1 in `dim`.
  virtual void arg_reduce(ArgReduceOp op, const Tensor& a, int dim, const Tensor& out) = 0;
  // Softmax (or log-softmax) along `dim`; contiguous in and out.
  virtual void softmax(const Tensor& a, int dim, bool log, const Tensor& out) = 0;
  // dx from y (the softmax output) and dy; contiguous, same shape.
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, int dim, bool log,
                                const Tensor& dx) = 0;

  // ---- linear algebra ----
  // out[b] = a[b] @ bt[b]: a (B, M, K), b (B, K, N), out (B, M, N) contiguous.
  // a and b may have any strides (transposed views, stride-0 batch dims).
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // ---- indexing (indices int64, checked against the sizes by the kernel) ----
  // out = a.index_select(dim, index); contiguous a and out.
  virtual void index_select(const Tensor& a, int dim, const Tensor& index, const Tensor& out) = 0;
  // out.index_select(dim, index) += src; contiguous out and src.
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // out[i][j] = a[index[i][j]][j] (dim 0), PyTorch's gather; out has index's shape.
  virtual void gather(const Tensor& a, int dim, const Tensor& index, const Tensor& out) = 0;
  // out[index[i][j]][j] += src[i][j] (dim 0), PyTorch's scatter_add_.
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
};

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
