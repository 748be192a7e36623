#include "parallel/sharding/sharded_grad_scaler.h"

#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

ShardedGradScaler::ShardedGradScaler(std::shared_ptr<ProcessGroup> group, optim::GradScalerOptions options)
    : GradScaler(options), group_(std::move(group)) {
  LOOM_CHECK(group_ != nullptr, "ShardedGradScaler: needs a process group");
  LOOM_CHECK(!options.capturable, "ShardedGradScaler: its ranks agree on the inf flag on the host, so it cannot be "
             "capturable");
}

bool ShardedGradScaler::agree_on_inf(bool found_here) {
  Tensor flag = full({1}, found_here ? 1.0 : 0.0);
  group_->all_reduce(flag, ReduceOp::Max)->wait();
  return flag.item() > 0;
}

}  // namespace loom::parallel
