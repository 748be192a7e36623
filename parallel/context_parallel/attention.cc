#include "parallel/context_parallel/attention.h"

#include <cmath>
#include <limits>

#include "parallel/tensor_parallel/conjugates.h"
#include "tensor/error.h"
#include "tensor/ops.h"

namespace loom::parallel {

Tensor context_parallel_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const std::shared_ptr<ProcessGroup>& group) {
  LOOM_CHECK(q.dim() == 4 && q.shape() == k.shape() && k.shape() == v.shape(),
             "context_parallel_attention: expected q, k, v of one shape (B, H, T/N, D), got ", q.shape(), ", ",
             k.shape(), ", ", v.shape());
  const int64_t tokens = q.size(2), first = group->rank() * tokens, seen = first + tokens;
  // Every rank's keys and values; this rank's queries never look past its own last token.
  const Tensor keys = gather_from_sequence_parallel(k, group, 2).narrow(2, 0, seen);
  const Tensor values = gather_from_sequence_parallel(v, group, 2).narrow(2, 0, seen);
  const TensorOptions positions{.dtype = kInt64, .device = q.device()};
  const Tensor query_at = (arange(tokens, positions) + static_cast<double>(first)).reshape({tokens, 1});
  const Tensor future = arange(seen, positions).reshape({1, seen}) > query_at;  // (T/N, seen)
  const double scale = 1 / std::sqrt(static_cast<double>(q.size(3)));
  const Tensor scores = masked_fill(matmul(q, keys.transpose(2, 3)) * scale, future,
                                    -std::numeric_limits<double>::infinity());
  // Exact zeros where the mask is: the softmax's exp leaves denormals there, which slow the product a hundredfold.
  return matmul(masked_fill(softmax(scores, -1), future, 0.0), values);
}

}  // namespace loom::parallel
