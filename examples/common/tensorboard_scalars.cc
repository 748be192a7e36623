#include "examples/common/tensorboard_scalars.h"

#include "tensor/allocator.h"

namespace loom::examples {

void log_step(tensorboard::SummaryWriter& board, int64_t step, double loss, double lr,
              const std::string& throughput_tag, double throughput, double mfu, Device device) {
  constexpr double kGiB = 1 << 30;
  const MemoryStats memory = memory_stats(device);
  board.add_scalar("loss_metrics/step_loss", loss, step);
  board.add_scalar("lr", lr, step);
  board.add_scalar(throughput_tag, throughput, step);
  if (mfu > 0) board.add_scalar("mfu(%)", 100 * mfu, step);
  board.add_scalar("memory/max_active(GiB)", memory.peak_allocated_bytes / kGiB, step);
  board.add_scalar("memory/reserved(GiB)", memory.reserved_bytes / kGiB, step);
}

}  // namespace loom::examples
