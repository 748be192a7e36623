// How all_reduce and reduce_scatter combine the ranks' values (PyTorch's
// torch.distributed.ReduceOp).
//
//   pg->all_reduce(grad, parallel::ReduceOp::Avg);   // mean over the ranks
//
// Avg needs a floating-point tensor; Sum, Max and Min take any numeric dtype.
#pragma once

namespace loom::parallel {

enum class ReduceOp { Sum, Avg, Max, Min };

const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

}  // namespace loom::parallel
