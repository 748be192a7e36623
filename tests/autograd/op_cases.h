// Every differentiable op, once: the table that drives both the CPU's
// finite-difference gradcheck (tests/autograd/gradcheck_test.cc) and the
// GPU-against-CPU gradients (tests/cuda/cuda_autograd_test.cc), so a new op
// gets both checks by being listed here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tensor/ops.h"

namespace loom::testing {

struct OpCase {
  std::string name;
  std::function<Tensor(const TensorList&)> fn;
  std::vector<Shape> shapes;  // of the float64 inputs
  double low = -2, high = 2;  // input range (shifted away from kinks where needed)
  // false: finite differences cannot check it (a float32 round trip's
  // rounding is noise to them); the GPU test still compares it with the CPU.
  bool finite_differences = true;
};

// An int64 index tensor on the device of `like` (the CPU in gradcheck, the GPU in its test).
inline Tensor index_on(const Tensor& like, std::vector<int64_t> values, const Shape& shape) {
  return from_vector<int64_t>(values, shape, {.dtype = kInt64, .device = like.device()});
}
inline Tensor index_on(const Tensor& like, std::vector<int64_t> values) {
  const Shape shape{static_cast<int64_t>(values.size())};
  return index_on(like, std::move(values), shape);
}

inline std::vector<OpCase> op_cases() {
  return {
      // unary
      {"neg", [](auto& x) { return -x[0]; }, {{3, 4}}},
      {"abs", [](auto& x) { return abs(x[0]); }, {{3, 4}}, 0.1, 2},
      {"square", [](auto& x) { return square(x[0]); }, {{3, 4}}},
      {"reciprocal", [](auto& x) { return reciprocal(x[0]); }, {{3, 4}}, 0.5, 2},
      {"exp", [](auto& x) { return exp(x[0]); }, {{3, 4}}},
      {"log", [](auto& x) { return log(x[0]); }, {{3, 4}}, 0.2, 3},
      {"sqrt", [](auto& x) { return sqrt(x[0]); }, {{3, 4}}, 0.2, 3},
      {"rsqrt", [](auto& x) { return rsqrt(x[0]); }, {{3, 4}}, 0.2, 3},
      {"sin", [](auto& x) { return sin(x[0]); }, {{3, 4}}},
      {"cos", [](auto& x) { return cos(x[0]); }, {{3, 4}}},
      {"pow_scalar", [](auto& x) { return pow(x[0], 3.5); }, {{3, 4}}, 0.2, 2},
      {"clamp", [](auto& x) { return clamp(x[0], -0.7, 0.9); }, {{4, 5}}},
      {"tanh", [](auto& x) { return tanh(x[0]); }, {{3, 4}}},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }, {{3, 4}}},
      {"relu", [](auto& x) { return relu(x[0]); }, {{3, 4}}},
      {"gelu", [](auto& x) { return gelu(x[0]); }, {{3, 4}}},
      {"gelu_tanh", [](auto& x) { return gelu(x[0], GeluApproximation::Tanh); }, {{3, 4}}},
      // binary, broadcasting both ways
      {"add", [](auto& x) { return add(x[0], x[1], 0.7); }, {{3, 4}, {4}}},
      {"sub", [](auto& x) { return sub(x[0], x[1], 1.3); }, {{3, 1}, {1, 4}}},
      {"mul", [](auto& x) { return x[0] * x[1]; }, {{2, 3, 4}, {3, 1}}},
      {"div", [](auto& x) { return x[0] / x[1]; }, {{3, 4}, {3, 4}}, 0.5, 2},
      {"div_broadcast", [](auto& x) { return x[0] / x[1]; }, {{4}, {3, 4}}, 0.5, 2},
      {"pow_tensor", [](auto& x) { return pow(x[0], x[1]); }, {{3, 4}, {4}}, 0.5, 2},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }, {{3, 4}, {3, 4}}},
      {"minimum", [](auto& x) { return minimum(x[0], x[1]); }, {{3, 4}, {4}}},
      {"lerp", [](auto& x) { return lerp(x[0], x[1], 0.3); }, {{3, 4}, {3, 1}}},
      {"scalar_ops", [](auto& x) { return (2.0 - x[0]) / 3.0 + 1.5 * x[0] - x[0] / 0.5; }, {{3, 4}}},
      // selection
      {"where", [](auto& x) { return where(x[0] > 0.0, x[0], x[1]); }, {{3, 4}, {4}}},
      {"masked_fill", [](auto& x) { return masked_fill(x[0], x[0] < 0.0, 0.25); }, {{3, 4}}},
      // reductions
      {"sum_all", [](auto& x) { return sum(x[0]); }, {{3, 4}}},
      {"sum_dims", [](auto& x) { return sum(x[0], {0, 2}); }, {{2, 3, 4}}},
      {"sum_keepdim", [](auto& x) { return sum(x[0], {1}, true); }, {{2, 3, 4}}},
      {"mean", [](auto& x) { return mean(x[0], {-1}); }, {{2, 3, 4}}},
      {"amax", [](auto& x) { return amax(x[0], {1, 2}); }, {{2, 3, 4}}},
      {"amin_keepdim", [](auto& x) { return amin(x[0], {0}, true); }, {{3, 4}}},
      {"var", [](auto& x) { return var(x[0], {0, 1}); }, {{3, 4, 2}}},
      {"var_population", [](auto& x) { return var(x[0], {1}, 0, true); }, {{3, 4}}},
      // softmax
      {"softmax_last", [](auto& x) { return softmax(x[0], -1); }, {{3, 5}}},
      {"softmax_middle", [](auto& x) { return softmax(x[0], 1); }, {{2, 3, 4}}},
      {"log_softmax", [](auto& x) { return log_softmax(x[0], 0); }, {{3, 4}}},
      {"log_softmax_strided", [](auto& x) { return log_softmax(x[0].t(), 1); }, {{3, 4}}},
      {"attention_softmax_scaled", [](auto& x) { return attention_softmax(x[0], 0.7, false); }, {{2, 3, 5}}},
      {"attention_softmax_causal", [](auto& x) { return attention_softmax(x[0], 0.5, true); }, {{2, 4, 4}}},
      // matrix products, including transposed operands and broadcast batches
      {"mm", [](auto& x) { return mm(x[0], x[1]); }, {{3, 4}, {4, 2}}},
      {"mm_transposed", [](auto& x) { return mm(x[0].t(), x[1].t()); }, {{4, 3}, {2, 4}}},
      {"bmm", [](auto& x) { return bmm(x[0], x[1]); }, {{2, 3, 4}, {2, 4, 2}}},
      {"matmul_broadcast", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 1, 3, 4}, {3, 4, 2}}},
      {"matmul_folded", [](auto& x) { return matmul(x[0], x[1]); }, {{2, 3, 4}, {4, 5}}},
      {"matmul_vector", [](auto& x) { return matmul(x[0], x[1]); }, {{4}, {3, 4, 2}}},
      // indexing
      {"index_select", [](auto& x) { return index_select(x[0], 0, index_on(x[0], {2, 0, 2})); }, {{3, 4}}},
      {"index_select_dim1", [](auto& x) { return index_select(x[0], 1, index_on(x[0], {3, 1})); }, {{3, 4}}},
      {"gather", [](auto& x) { return gather(x[0], 1, index_on(x[0], {0, 2, 2, 1, 0, 0}, {3, 2})); }, {{3, 4}}},
      {"scatter_add",
       [](auto& x) { return scatter_add(x[0], 0, index_on(x[0], {1, 0, 1, 1, 0, 0}, {2, 3}), x[1]); },
       {{3, 3}, {2, 3}}},
      {"index_add", [](auto& x) { return index_add(x[0], 0, index_on(x[0], {1, 1}), x[1]); }, {{3, 2}, {2, 2}}},
      // views and copies
      {"reshape", [](auto& x) { return x[0].reshape({4, 3}) * x[1]; }, {{3, 4}, {3}}},
      {"reshape_copying", [](auto& x) { return x[0].t().reshape({12}); }, {{3, 4}}},
      {"transpose", [](auto& x) { return x[0].transpose(0, 2); }, {{2, 3, 4}}},
      {"permute", [](auto& x) { return x[0].permute({1, 2, 0}) * 2.0; }, {{2, 3, 4}}},
      {"narrow", [](auto& x) { return x[0].narrow(1, 1, 2); }, {{3, 4}}},
      {"slice_step", [](auto& x) { return x[0].slice(1, 0, 4, 2); }, {{3, 4}}},
      {"select", [](auto& x) { return x[0].select(0, 1); }, {{3, 4}}},
      {"expand", [](auto& x) { return x[0].expand({2, 3, 4}); }, {{3, 1}}},
      {"squeeze_unsqueeze", [](auto& x) { return x[0].unsqueeze(1).squeeze(2) * 1.5; }, {{3, 1}}},
      {"flatten", [](auto& x) { return x[0].flatten(); }, {{2, 3, 2}}},
      {"contiguous", [](auto& x) { return x[0].t().contiguous(); }, {{3, 4}}},
      {"clone", [](auto& x) { return x[0].clone() * x[0]; }, {{3, 4}}},
      {"cat", [](auto& x) { return cat({x[0], x[1]}, 1); }, {{3, 2}, {3, 4}}},
      {"stack", [](auto& x) { return stack({x[0], x[1] * 2.0}, 2); }, {{3, 2}, {3, 2}}},
      {"split", [](auto& x) { return split(x[0], 2, 1)[1] * split(x[0], 2, 1)[0]; }, {{3, 4}}},
      {"chunk", [](auto& x) { return chunk(x[0], 3, 0)[2]; }, {{5, 2}}},
      {"split_partly_used", [](auto& x) { return split(x[0], {1, 2, 1}, 1)[1] * 2.0; }, {{3, 4}}},
      {"unbind", [](auto& x) { TensorList r = unbind(x[0], 1); return r[0] * r[2] + r[1]; }, {{3, 3}}},
      // composites across several ops
      {"layer_norm_by_hand",
       [](auto& x) {
         Tensor mu = mean(x[0], {-1}, true);
         return (x[0] - mu) * rsqrt(var(x[0], {-1}, 0, true) + 1e-5) * x[1];
       },
       {{3, 5}, {5}}},
      // across devices and dtypes (the finite differences of a float32 round trip are noise)
      {"to_float32_and_back", [](auto& x) { return x[0].to(kFloat32).to(kFloat64) * x[0]; }, {{3, 4}}, -2, 2, false},
      {"device_round_trip", [](auto& x) { return x[0].cpu().to(x[1].device()) * x[1]; }, {{3, 4}, {3, 4}}},
      {"mlp",
       [](auto& x) {
         Tensor h = gelu(matmul(x[0], x[1]) + x[2]);
         return log_softmax(matmul(h, x[1].t()), -1);
       },
       {{8, 6}, {6, 5}, {5}}},
  };
}

inline void PrintTo(const OpCase& c, std::ostream* out) { *out << c.name; }

}  // namespace loom::testing
