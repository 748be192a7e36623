// The CPU backend: kernels on Eigen and OpenMP threads.
//
// Each group of kernels lives in its own file (elementwise.cc, reduce.cc,
// matmul.cc, index.cc, random.cc); this class only ties them to the Backend
// interface.
#pragma once

#include "tensor/backend.h"

namespace loom::cpu {

class CpuBackend final : public Backend {
 public:
  Allocator& allocator(int device_index) override;
  int device_count() override { return 1; }
  void synchronize(int) override {}

  void unary(UnaryOp op, const Tensor& a, const Tensor& out, double alpha, double beta) override;
  bool has_unary_with_derivative(UnaryOp op, DType dtype) const override;
  void unary_with_derivative(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dydx) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
              double alpha) override;
  void ternary(TernaryOp op, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& out,
               double alpha) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& out, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void random(RandomOp op, const Tensor& out, double a, double b, const Draw& draw) override;

  void reduce(ReduceOp op, const Tensor& a, const Tensor& out) override;
  void arg_reduce(ArgReduceOp op, const Tensor& a, int dim, const Tensor& out) override;
  void softmax(const Tensor& a, int dim, const SoftmaxParams& p, const Tensor& out) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, int dim, const SoftmaxParams& p,
                        const Tensor& dx) override;

  void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) override;
  std::unique_ptr<PreparedProduct> prepare_product(const Tensor& b) override;

  void index_select(const Tensor& a, int dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& a, int dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;

  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p,
              const Tensor& out) override;
  void conv2d_backward_input(const Tensor& dy, const Tensor& relu_out, const Tensor& w, const Conv2dParams& p,
                             const Tensor& dx) override;
  void conv2d_backward_weight(const Tensor& dy, const Tensor& relu_out, const Tensor& x, const Conv2dParams& p,
                              const Tensor& dw, const Tensor& dbias) override;

  void max_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) override;
  void avg_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out) override;
  void avg_pool2d_backward(const Tensor& dy, const Pool2dParams& p, const Tensor& dx) override;
  void adaptive_avg_pool2d(const Tensor& x, const Tensor& out) override;
  void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) override;

  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& y,
                  const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                           const Tensor& dbias) override;

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionParams& p, const Tensor& out,
                 const Tensor& logsumexp) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& dout,
                          const Tensor& logsumexp, const AttentionParams& p, const Tensor& dq, const Tensor& dk,
                          const Tensor& dv) override;
  void for_row_blocks(int64_t rows, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& fn) override;
  void lstm_cell(const Tensor& input_gates, const Tensor& hidden_gates, const Tensor& c_prev, const Tensor& h,
                 const Tensor& c, const Tensor& activations) override;
  void lstm_cell_backward(const Tensor& dh, const Tensor& dc, const Tensor& activations, const Tensor& c_prev,
                          const Tensor& c, const Tensor& dgates, const Tensor& dc_prev) override;

  void float8_cast(const Tensor& x, const Tensor& amax, Float8Format format, const Tensor& bits, const Tensor& bits_t,
                   const Tensor& inv_scale) override;
  void float8_matmul(const Tensor& a, Float8Format a_format, const Tensor& a_inv_scale, const Tensor& b,
                     Float8Format b_format, const Tensor& b_inv_scale, const Tensor& bias, const Tensor& out) override;

  void adam_step(const TensorList& params, const TensorList& grads, const TensorList& exp_avg,
                 const TensorList& exp_avg_sq, const AdamParams& p) override;
  void sgd_step(const TensorList& params, const TensorList& grads, const TensorList& momentum_buffers,
                const SgdParams& p) override;
  void unscale_and_check_finite(const TensorList& grads, double inv_scale, const Tensor& found_inf,
                                const Tensor& device_scale = Tensor()) override;
  void update_grad_scale(const Tensor& scale, const Tensor& good_steps, const Tensor& found_inf,
                         double growth_factor, double backoff_factor, int growth_interval) override;
};

CpuBackend& cpu_backend();

// The host allocator (caching, 64-byte aligned).
Allocator& cpu_allocator();

}  // namespace loom::cpu
