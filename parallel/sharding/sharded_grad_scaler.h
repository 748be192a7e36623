// A GradScaler for ranks that each hold part of the gradients: PyTorch's
// ShardedGradScaler. Used by char_gpt --tp (tensor parallelism); with
// FullyShardedDataParallel (it unscales the gradient shards the optimizer
// steps) and ZeroRedundancyOptimizer at stage 1 it trains as without a
// scaler. Stage 2 reduces the gradients during backward, where no scaler
// sees them, and unscale_ says so. Every rank must
// skip the same steps and keep the same scale, but each sees only its own
// gradients, so the inf/NaN check is combined over the group (one
// all_reduce(Max) of a flag per optimizer and step).
//
//   parallel::ShardedGradScaler scaler(group);
//   scaler.scale(loss).backward();
//   scaler.step(opt);     // skipped on every rank if any rank's gradients overflowed
//   scaler.update();
#pragma once

#include <memory>

#include "optim/grad_scaler.h"
#include "parallel/comm/process_group.h"

namespace loom::parallel {

class ShardedGradScaler : public optim::GradScaler {
 public:
  explicit ShardedGradScaler(std::shared_ptr<ProcessGroup> group, optim::GradScalerOptions options = {});

 protected:
  bool agree_on_inf(bool found_here) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

}  // namespace loom::parallel
