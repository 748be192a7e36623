// Row blocks on threads: each thread takes whole rows of an independent
// computation and runs all of its steps alone. For an LSTM's recurrence this
// replaces, at every time step, a small product split across the threads
// and a wait for all of them with one split for the whole sequence.
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/parallel.h"

namespace loom::cpu {
namespace {

// The least work (in multiply-adds or elementwise operations) that pays for
// handing a block to a thread of its own: about 20 microseconds of a core.
constexpr int64_t kBlockWork = int64_t{1} << 20;

}  // namespace

void CpuBackend::for_row_blocks(int64_t rows, int64_t work_per_row, const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t grain = std::max<int64_t>(1, kBlockWork / std::max<int64_t>(work_per_row, 1));
  parallel_for(rows, grain, fn);
}

}  // namespace loom::cpu
