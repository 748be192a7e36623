// The scalars the examples log to TensorBoard (--tensorboard DIR) at each
// progress line, named as torchtitan names its metrics, so that dashboards
// built for it read loom's runs (docs/examples.md lists every tag):
//
//   tensorboard::SummaryWriter board(dir);
//   log_step(board, step, loss, optimizer.lr(), "throughput(tps)", tokens_per_s, mfu, device);
//   //  loss_metrics/step_loss, lr, throughput(tps), mfu(%), memory/max_active(GiB), memory/reserved(GiB)
#pragma once

#include <cstdint>
#include <string>

#include "tensor/device.h"
#include "tensorboard/summary_writer.h"

namespace loom::examples {

// `loss`: this rank's loss of the step's batch (its share under data
// parallelism). Memory is `device`'s allocator: the peak held by tensors since
// the start, and what it has reserved now (the caching allocator only grows
// it, so it is also the peak). `mfu` is a fraction, logged as a percentage
// (torchtitan's mfu(%)) when it is above 0.
void log_step(tensorboard::SummaryWriter& board, int64_t step, double loss, double lr,
              const std::string& throughput_tag, double throughput, double mfu, Device device);

}  // namespace loom::examples
