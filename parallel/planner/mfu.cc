#include "parallel/planner/mfu.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "parallel/planner/device_table.h"
#include "parallel/planner/gpu_name.h"
#include "tensor/creation.h"
#include "tensor/flop_counter.h"
#include "tensor/ops.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {

int64_t count_step_flops(const std::function<void()>& step) {
  FlopCounter counter;
  {
    FlopCounter::Scope scope(counter);
    step();
  }
  return counter.total();
}

double measure_cpu_gemm_flops(int64_t n, int rounds) {
  NoGradGuard no_grad;
  // Not random: a measurement must not draw from the global generator, which a
  // resumed run has just restored (its stream would shift by these draws).
  const Tensor a = full({n, n}, 0.5), b = full({n, n}, 0.25);
  mm(a, b);  // warm: Eigen's buffers, the threads
  double best = 0;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    mm(a, b);
    best = std::max(best, 2.0 * n * n * n / seconds_since(start));
  }
  return best;
}

Peak device_peak(Device device, const std::string& precision) {
  char text[160];
  if (device.is_cpu()) {
    const int64_t n = 1024;
    std::snprintf(text, sizeof text, "measured: fp32 GEMM %lld^3, %d threads", static_cast<long long>(n),
                  omp_get_max_threads());
    return {measure_cpu_gemm_flops(n), text};
  }
  const std::string gpu = gpu_name(device);
  std::snprintf(text, sizeof text, "data sheet: %s, dense %s", gpu.c_str(), precision.c_str());
  return {dense_peak_flops(gpu, precision), text};
}

}  // namespace loom::parallel
