// The CUDA reductions' plan: which of a tensor's dims are kept (one output
// each) and which reduced, merged where they step evenly through memory,
// and where each output and each of its elements lie. Plain C++ apart from
// the kernels (element offsets are host and device code), so that the CPU
// tests check it against every element (tests/cuda/reduce_plan_test.cc).
//
//   ReducePlan plan = make_plan(a, out, [&](int d) { return out.size(d) == 1; }, true);
//   kept_offsets(plan, output, in_offset, out_offset);   // output's first input, and the output
//   in[in_offset + reduced_offset(plan, r)]             // its r-th element, r < plan.reduced
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "tensor/host_device.h"
#include "tensor/tensor.h"

namespace loom::cuda {

// Sizes and strides in elements, innermost first.
struct ReducePlan {
  int kept_dims = 0;
  int64_t kept_sizes[kMaxDims] = {};
  int64_t kept_in_strides[kMaxDims] = {};
  int64_t kept_out_strides[kMaxDims] = {};
  int reduced_dims = 0;
  int64_t reduced_sizes[kMaxDims] = {};
  int64_t reduced_strides[kMaxDims] = {};
  int64_t outputs = 1;  // elements of out
  int64_t reduced = 1;  // elements combined into each
};

// `reduced_dim(d)` says which of a's dims are reduced (out has a's rank,
// size 1 there); size-1 dims are dropped. With `may_merge_reduced` (an
// order-free combination, a sum or a max), the reduced dims are sorted by
// stride, smallest innermost, and merged where they continue each other;
// without (argmax: r is the position along its dim), they keep their order.
template <typename IsReduced>
ReducePlan make_plan(const Tensor& a, const Tensor& out, IsReduced reduced_dim, bool may_merge_reduced) {
  ReducePlan plan;
  std::vector<std::pair<int64_t, int64_t>> reduced;  // (stride, size)
  for (int d = a.dim() - 1; d >= 0; --d) {
    const int64_t size = a.size(d);
    if (size == 1) continue;
    if (reduced_dim(d)) {
      reduced.emplace_back(a.stride(d), size);
      plan.reduced *= size;
      continue;
    }
    plan.outputs *= size;
    const int k = plan.kept_dims;
    if (k > 0 && a.stride(d) == plan.kept_in_strides[k - 1] * plan.kept_sizes[k - 1] &&
        out.stride(d) == plan.kept_out_strides[k - 1] * plan.kept_sizes[k - 1]) {
      plan.kept_sizes[k - 1] *= size;
    } else {
      plan.kept_sizes[k] = size;
      plan.kept_in_strides[k] = a.stride(d);
      plan.kept_out_strides[k] = out.stride(d);
      ++plan.kept_dims;
    }
  }
  // A sum does not care in which order it meets its elements: walk the
  // smallest stride fastest, merging dims that continue each other.
  if (may_merge_reduced)
    std::stable_sort(reduced.begin(), reduced.end(),
                     [](const auto& x, const auto& y) { return std::abs(x.first) < std::abs(y.first); });
  for (const auto& [stride, size] : reduced) {
    const int k = plan.reduced_dims;
    if (may_merge_reduced && k > 0 && stride == plan.reduced_strides[k - 1] * plan.reduced_sizes[k - 1]) {
      plan.reduced_sizes[k - 1] *= size;
    } else {
      plan.reduced_sizes[k] = size;
      plan.reduced_strides[k] = stride;
      ++plan.reduced_dims;
    }
  }
  return plan;
}

// Where output number `output` (row-major over the kept dims) is, and where
// its first input element is.
LOOM_HOST_DEVICE void kept_offsets(const ReducePlan& plan, int64_t output, int64_t& in_offset, int64_t& out_offset) {
  in_offset = 0;
  out_offset = 0;
  LOOM_UNROLL
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == plan.kept_dims) break;
    const int64_t i = output % plan.kept_sizes[d];
    output /= plan.kept_sizes[d];
    in_offset += i * plan.kept_in_strides[d];
    out_offset += i * plan.kept_out_strides[d];
  }
}

// Where an output's element number r is, from its first.
LOOM_HOST_DEVICE int64_t reduced_offset(const ReducePlan& plan, int64_t r) {
  if (plan.reduced_dims == 1) return r * plan.reduced_strides[0];
  int64_t offset = 0;
  LOOM_UNROLL
  for (int d = 0; d < kMaxDims; ++d) {
    if (d == plan.reduced_dims) break;
    offset += (r % plan.reduced_sizes[d]) * plan.reduced_strides[d];
    r /= plan.reduced_sizes[d];
  }
  return offset;
}

}  // namespace loom::cuda
