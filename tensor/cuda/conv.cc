// CUDA 2-D convolution (NCHW, groups, stride, padding, dilation) and its two
// gradients, through cuDNN's convolution API.
//
// Algorithms: cuDNN's heuristics rank the candidates for a shape
// (cudnnGet*Algorithm_v7, no trial runs), or with set_cudnn_benchmark(true)
// its trial runs on the real operands do (cudnnFind*AlgorithmEx, fastest
// first); the first one that runs is remembered per (direction, shapes,
// geometry, dtype, TF32 switch, benchmark switch, device).
// For float32 without set_allow_tf32(true), candidates that need tensor-op
// math are skipped and the rest run with CUDNN_FMA_MATH: exact FP32, like
// matmul. Workspace comes from the caching allocator on the current stream.
//
// A fused ReLU (Conv2dParams::relu) is a separate elementwise pass here: the
// forward applies it to the output in place, the backward masks dy first.
//
// bfloat16 and float16 convolve with float accumulation (the descriptor's
// compute type) on the tensor cores; their bias is added by loom's own
// kernels, in float and rounded once. Every dtype's bias gradient is loom's
// own sum over (N, H, W) (conv2d_backward_weight says why).
//
// cuDNN 9 marks this descriptor API deprecated in favour of its graph API;
// it is still shipped and supported, and is much shorter to use correctly.
#include <cudnn.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/creation.h"
#include "tensor/cudnn_benchmark.h"
#include "tensor/host_waits.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/handles.h"
#include "tensor/cuda/launch.h"
#include "tensor/precision.h"

namespace loom::cuda {
namespace {

cudnnDataType_t cudnn_type(DType dtype, const char* op) {
  switch (dtype) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    case kFloat16: return CUDNN_DATA_HALF;
    default: LOOM_FAIL(op, ": CUDA convolution takes floating-point tensors, got ", dtype);
  }
}

// What cuDNN accumulates in: float for the 16-bit types.
cudnnDataType_t cudnn_compute_type(DType dtype, const char* op) {
  return is_16bit_floating(dtype) ? CUDNN_DATA_FLOAT : cudnn_type(dtype, op);
}

int as_int(int64_t v, const char* op) {
  LOOM_CHECK(v >= 0 && v <= INT32_MAX, op, ": size ", v, " is too large for cuDNN");
  return static_cast<int>(v);
}

class TensorDescriptor {
 public:
  TensorDescriptor(const Tensor& t, const char* op)
      : TensorDescriptor(t.dtype(), t.size(0), t.size(1), t.size(2), t.size(3), op) {}
  // A bias (C) as cuDNN broadcasts it: (1, C, 1, 1).
  static TensorDescriptor bias(const Tensor& b, const char* op) { return {b.dtype(), 1, b.size(0), 1, 1, op}; }
  TensorDescriptor(DType dtype, int64_t n, int64_t c, int64_t h, int64_t w, const char* op) {
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, cudnn_type(dtype, op), as_int(n, op),
                                           as_int(c, op), as_int(h, op), as_int(w, op)));
  }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(desc_); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor(const Tensor& w, const char* op) {
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, cudnn_type(w.dtype(), op), CUDNN_TENSOR_NCHW,
                                           as_int(w.size(0), op), as_int(w.size(1), op),
                                           as_int(w.size(2), op), as_int(w.size(3), op)));
  }
  ~FilterDescriptor() { cudnnDestroyFilterDescriptor(desc_); }
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor(const Conv2dParams& p, DType dtype, const char* op) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_, p.pad_h, p.pad_w, p.stride_h, p.stride_w, p.dilation_h,
                                                p.dilation_w, CUDNN_CROSS_CORRELATION,
                                                cudnn_compute_type(dtype, op)));
    CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_, p.groups));
  }
  ~ConvolutionDescriptor() { cudnnDestroyConvolutionDescriptor(desc_); }
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

enum class Direction { Forward, BackwardData, BackwardFilter };

struct Candidate {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};

// The algorithms that worked, per problem.
class AlgorithmCache {
 public:
  bool find(const std::string& key, Candidate* out) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = chosen_.find(key);
    if (it == chosen_.end()) return false;
    *out = it->second;
    return true;
  }
  void remember(const std::string& key, const Candidate& c) {
    std::lock_guard<std::mutex> lock(mutex_);
    chosen_[key] = c;
  }

 private:
  std::mutex mutex_;
  std::map<std::string, Candidate> chosen_;
};

AlgorithmCache& algorithm_cache() {
  static auto* cache = new AlgorithmCache();  // never destroyed
  return *cache;
}

std::string problem_key(Direction direction, const Tensor& x, const Tensor& w, const Tensor& y,
                        const Conv2dParams& p, int device) {
  std::ostringstream key;
  key << static_cast<int>(direction) << '|' << device << '|' << x.dtype() << '|' << allow_tf32() << '|'
      << cudnn_benchmark() << '|' << x.shape() << w.shape() << y.shape() << '|' << p.stride_h << ',' << p.stride_w << ',' << p.pad_h << ','
      << p.pad_w << ',' << p.dilation_h << ',' << p.dilation_w << ',' << p.groups;
  return key.str();
}

// Exact FP32 unless TF32 is allowed; float64 has no faster mode to avoid.
bool exact_fp32(DType dtype) { return dtype == kFloat32 && !allow_tf32(); }

bool uses_tensor_ops(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Ranked candidates from cuDNN's heuristics, filtered for the precision asked.
template <typename Perf>
std::vector<Candidate> usable(const Perf* perf, int count, DType dtype) {
  std::vector<Candidate> out;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (exact_fp32(dtype) && uses_tensor_ops(perf[i].mathType)) continue;
    // For float32 data, "allow conversion" lets cuDNN compute in float16:
    // less range and precision than even TF32 promises.
    if (dtype == kFloat32 && perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    out.push_back({static_cast<int>(perf[i].algo), exact_fp32(dtype) ? CUDNN_FMA_MATH : perf[i].mathType,
                   perf[i].memory});
  }
  return out;
}

// The workspace cuDNN's trial runs may use: as much as its heuristics'
// hungriest candidate asks, capped (an algorithm needing more is not tried).
constexpr size_t kMaxBenchmarkWorkspace = size_t{1} << 30;

// A scratch workspace for cudnnFind*AlgorithmEx, of `bytes` or less if the
// device cannot spare them; its size in `bytes`.
Tensor benchmark_workspace(const Device& device, size_t* bytes) {
  *bytes = std::min(*bytes, kMaxBenchmarkWorkspace);
  while (*bytes > 0) {
    try {
      return empty({static_cast<int64_t>(*bytes)}, {.dtype = kUInt8, .device = device});
    } catch (const Error&) {
      *bytes /= 2;
    }
  }
  return Tensor();
}

// A direction's candidates, best first: as cuDNN's heuristics rank them, or
// with cudnn_benchmark() as its trial runs on the real operands do. `get`
// and `find` fill a Perf array (the _v7 and FindEx calls of the direction).
template <typename Perf, typename Get, typename Find>
std::vector<Candidate> ranked(DType dtype, const Device& device, int max_count, const Get& get, const Find& find) {
  std::vector<Perf> perf(max_count);
  int count = 0;
  CUDNN_CHECK(get(max_count, &count, perf.data()));
  if (!cudnn_benchmark()) return usable(perf.data(), count, dtype);
  size_t bytes = 0;
  for (const Candidate& c : usable(perf.data(), count, dtype)) bytes = std::max(bytes, c.workspace);
  // Timing waits for the device: refused inside a CUDA graph capture.
  note_host_wait("cuDNN's timing of convolution algorithms (set_cudnn_benchmark) for a shape first met here");
  Tensor workspace = benchmark_workspace(device, &bytes);
  CUDNN_CHECK(find(max_count, &count, perf.data(), workspace.defined() ? workspace.raw_data() : nullptr, bytes));
  return usable(perf.data(), count, dtype);  // fastest first
}

// Whether cuDNN refused an algorithm for this call rather than failed:
// cuDNN 9 says "not supported" with a family of codes (shape, layout, shared
// memory, ...), and a vectorised algorithm refuses a misaligned pointer.
bool refused(cudnnStatus_t status) {
  return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED ||
         status == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
}

// Runs `call(candidate, workspace, bytes)` with the remembered algorithm, or
// with each ranked candidate until one runs. An algorithm cuDNN refuses, or
// whose workspace does not fit, is not an error: the next one is tried. The
// remembered one may refuse a call its first call did not (a view at an odd
// offset); then the ranking runs for this call, and the memory stays.
template <typename Rank, typename Call>
void run_convolution(const char* op, const std::string& key, const ConvolutionDescriptor& conv, DType dtype,
                     const Device& device, Rank rank, Call call) {
  auto runs = [&](const Candidate& c) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), c.math));
    Tensor workspace;
    if (c.workspace > 0) {
      try {
        workspace = empty({static_cast<int64_t>(c.workspace)}, {.dtype = kUInt8, .device = device});
      } catch (const Error&) {
        return false;  // out of memory for this one: try a leaner algorithm
      }
    }
    const cudnnStatus_t status = call(c, workspace.defined() ? workspace.raw_data() : nullptr, c.workspace);
    if (status != CUDNN_STATUS_SUCCESS && !refused(status)) CUDNN_CHECK(status);
    return status == CUDNN_STATUS_SUCCESS;
  };
  Candidate remembered{};
  const bool known = algorithm_cache().find(key, &remembered);
  if (known && runs(remembered)) return;
  CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), exact_fp32(dtype) ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  for (const Candidate& c : rank()) {
    if (!runs(c)) continue;
    if (!known) algorithm_cache().remember(key, c);
    return;
  }
  LOOM_FAIL(op, ": cuDNN found no algorithm it can run for this convolution (", key, ")");
}

// alpha = 1, beta = 0: double for float64 data, float otherwise (cuDNN's rule).
struct Scalars {
  explicit Scalars(DType dtype) : is_double(dtype == kFloat64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return is_double ? static_cast<const void*>(&zero_d) : &zero_f; }
  bool is_double;
  float one_f = 1, zero_f = 0;
  double one_d = 1, zero_d = 0;
};

// A bias (C) seen as `shape` (N, C, H, W) or (1, C, 1, 1): stride 0 but
// along C (a raw view, which records nothing for autograd).
Tensor as_channels(const Tensor& bias, const Shape& shape) {
  return as_strided(bias, shape, Strides{0, bias.stride(0), 0, 0}, bias.storage_offset());
}

// out (N, C, H, W) += bias (C) broadcast, when bias is defined (float32/64).
void add_bias(cudnnHandle_t handle, const Tensor& bias, const Tensor& out, const char* op) {
  if (!bias.defined()) return;
  const Scalars s(out.dtype());
  const TensorDescriptor bd = TensorDescriptor::bias(bias, op);
  TensorDescriptor yd(out, op);
  CUDNN_CHECK(cudnnAddTensor(handle, s.one(), bd.get(), bias.raw_data(), s.one(), yd.get(), out.raw_data()));
}

// dy where the fused ReLU's output is positive, else 0 (dy itself without one).
Tensor through_relu_mask(CudaBackend& backend, const Tensor& dy, const Tensor& relu_out) {
  if (!relu_out.defined()) return dy;
  Tensor masked = empty(dy.shape(), dy.options());
  backend.binary(BinaryOp::ReluBackward, dy, relu_out, masked, 0);
  return masked;
}

// The same for every dtype: the 16-bit ones through loom's broadcast add.
void add_conv_bias(CudaBackend& backend, cudnnHandle_t handle, const Tensor& bias, const Tensor& out) {
  if (!bias.defined()) return;
  if (!is_16bit_floating(out.dtype())) return add_bias(handle, bias, out, "conv2d");
  backend.binary(BinaryOp::Add, out, as_channels(bias, out.shape()), out, 1);
}

}  // namespace

void CudaBackend::conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
                         const Tensor& out) {
  const char* op = "conv2d";
  if (out.numel() == 0) return;
  LaunchContext ctx(out);
  cudnnHandle_t handle = cudnn_handle(ctx.device);
  if (x.numel() == 0 || w.numel() == 0) {
    fill(out, 0);
    add_conv_bias(*this, handle, bias, out);
    if (p.relu) unary(UnaryOp::Relu, out, out, 0, 0);
    return;
  }
  TensorDescriptor xd(x, op), yd(out, op);
  FilterDescriptor wd(w, op);
  ConvolutionDescriptor conv(p, x.dtype(), op);
  const Scalars s(x.dtype());
  run_convolution(
      op, problem_key(Direction::Forward, x, w, out, p, ctx.device), conv, x.dtype(), out.device(),
      [&] {
        return ranked<cudnnConvolutionFwdAlgoPerf_t>(
            x.dtype(), out.device(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
            [&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* perf) {
              return cudnnGetConvolutionForwardAlgorithm_v7(handle, xd.get(), wd.get(), conv.get(), yd.get(), n,
                                                            count, perf);
            },
            [&](int n, int* count, cudnnConvolutionFwdAlgoPerf_t* perf, void* workspace, size_t bytes) {
              return cudnnFindConvolutionForwardAlgorithmEx(handle, xd.get(), x.raw_data(), wd.get(), w.raw_data(),
                                                            conv.get(), yd.get(), out.raw_data(), n, count, perf,
                                                            workspace, bytes);
            });
      },
      [&](const Candidate& c, void* workspace, size_t bytes) {
        return cudnnConvolutionForward(handle, s.one(), xd.get(), x.raw_data(), wd.get(), w.raw_data(), conv.get(),
                                       static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), workspace, bytes, s.zero(),
                                       yd.get(), out.raw_data());
      });
  add_conv_bias(*this, handle, bias, out);
  if (p.relu) unary(UnaryOp::Relu, out, out, 0, 0);
}

void CudaBackend::conv2d_backward_input(const Tensor& dy_in, const Tensor& relu_out, const Tensor& w,
                                        const Conv2dParams& p, const Tensor& dx) {
  const char* op = "conv2d_backward_input";
  if (dx.numel() == 0) return;
  LaunchContext ctx(dx);
  const Tensor dy = through_relu_mask(*this, dy_in, relu_out);
  if (dy.numel() == 0 || w.numel() == 0) return fill(dx, 0);
  cudnnHandle_t handle = cudnn_handle(ctx.device);
  TensorDescriptor dyd(dy, op), dxd(dx, op);
  FilterDescriptor wd(w, op);
  ConvolutionDescriptor conv(p, dy.dtype(), op);
  const Scalars s(dy.dtype());
  run_convolution(
      op, problem_key(Direction::BackwardData, dx, w, dy, p, ctx.device), conv, dy.dtype(), dx.device(),
      [&] {
        return ranked<cudnnConvolutionBwdDataAlgoPerf_t>(
            dy.dtype(), dx.device(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
            [&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
              return cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, wd.get(), dyd.get(), conv.get(), dxd.get(),
                                                                 n, count, perf);
            },
            [&](int n, int* count, cudnnConvolutionBwdDataAlgoPerf_t* perf, void* workspace, size_t bytes) {
              return cudnnFindConvolutionBackwardDataAlgorithmEx(handle, wd.get(), w.raw_data(), dyd.get(),
                                                                 dy.raw_data(), conv.get(), dxd.get(), dx.raw_data(),
                                                                 n, count, perf, workspace, bytes);
            });
      },
      [&](const Candidate& c, void* workspace, size_t bytes) {
        return cudnnConvolutionBackwardData(handle, s.one(), wd.get(), w.raw_data(), dyd.get(), dy.raw_data(),
                                            conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                            workspace, bytes, s.zero(), dxd.get(), dx.raw_data());
      });
}

void CudaBackend::conv2d_backward_weight(const Tensor& dy_in, const Tensor& relu_out, const Tensor& x,
                                         const Conv2dParams& p, const Tensor& dw, const Tensor& dbias) {
  const char* op = "conv2d_backward_weight";
  const Tensor dy = through_relu_mask(*this, dy_in, relu_out);
  if (dbias.defined() && dbias.numel() > 0) {
    LaunchContext ctx(dbias);
    if (dy.numel() == 0) {
      fill(dbias, 0);
    } else {
      // loom's sum over (N, H, W), not cuDNN's cudnnConvolutionBackwardBias:
      // on an H100 (2026-11-28) that took 0.25 ms of the Fashion-MNIST CNN's
      // 0.94 ms step, about ten times what reading dy once costs. 16-bit dy
      // sums in float and rounds once.
      reduce(ReduceOp::Sum, dy, as_channels(dbias, Shape{1, dbias.size(0), 1, 1}));
    }
  }
  if (dw.numel() == 0) return;
  LaunchContext ctx(dw);
  if (dy.numel() == 0 || x.numel() == 0) return fill(dw, 0);
  cudnnHandle_t handle = cudnn_handle(ctx.device);
  TensorDescriptor xd(x, op), dyd(dy, op);
  FilterDescriptor dwd(dw, op);
  ConvolutionDescriptor conv(p, x.dtype(), op);
  const Scalars s(x.dtype());
  run_convolution(
      op, problem_key(Direction::BackwardFilter, x, dw, dy, p, ctx.device), conv, x.dtype(), dw.device(),
      [&] {
        return ranked<cudnnConvolutionBwdFilterAlgoPerf_t>(
            x.dtype(), dw.device(), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
            [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
              return cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, xd.get(), dyd.get(), conv.get(),
                                                                   dwd.get(), n, count, perf);
            },
            [&](int n, int* count, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* workspace, size_t bytes) {
              return cudnnFindConvolutionBackwardFilterAlgorithmEx(handle, xd.get(), x.raw_data(), dyd.get(),
                                                                   dy.raw_data(), conv.get(), dwd.get(),
                                                                   dw.raw_data(), n, count, perf, workspace, bytes);
            });
      },
      [&](const Candidate& c, void* workspace, size_t bytes) {
        return cudnnConvolutionBackwardFilter(handle, s.one(), xd.get(), x.raw_data(), dyd.get(), dy.raw_data(),
                                              conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                              workspace, bytes, s.zero(), dwd.get(), dw.raw_data());
      });
}

}  // namespace loom::cuda
