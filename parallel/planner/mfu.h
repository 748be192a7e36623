// Achieved FLOP/s and model FLOPs utilisation (MFU) for a training run: the
// FLOPs of one step, counted at the op dispatch point (tensor/flop_counter.h),
// over the step's time, against the device's peak.
//
//   const int64_t flops = parallel::count_step_flops([&] { train_step(); });   // one eager step
//   const parallel::Peak peak = parallel::device_peak(device, "fp32");
//   double mfu = flops / seconds_per_step / peak.flops_per_s;               // when peak.flops_per_s > 0
//
// A GPU's peak is its data sheet's dense rate for the precision
// (device_table.h). A CPU has no such number that a run can reach, so its
// peak is measured in the same run: the best of a few square float32 GEMMs
// through loom's own matmul at the run's thread count, "the GEMM rate this
// machine reaches now" (a shared VM's speed drifts, so a rate measured another
// hour would not compare). MFU counts the model's FLOPs (PaLM's definition):
// count a step without activation checkpointing, whose recomputed forward
// is work the hardware does but the model does not need.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tensor/device.h"

namespace loom::parallel {

struct Peak {
  double flops_per_s = 0;  // 0: not known (a GPU the table lacks): no MFU
  std::string source;      // how it was found: "measured: fp32 GEMM 1024^3, 2 threads" or "data sheet: ..."
};

// FLOPs of what `step` runs (forward, backward, optimizer), counted once on this thread.
int64_t count_step_flops(const std::function<void()>& step);

// The best of `rounds` float32 n x n x n products on the CPU through loom's mm,
// after one untimed, in FLOP/s, at OpenMP's current thread count.
double measure_cpu_gemm_flops(int64_t n = 1024, int rounds = 3);

// The peak MFU is measured against: the CPU's measured GEMM rate (float32:
// its only precision at full rate), a GPU's dense data-sheet rate for
// `precision` (fp32, tf32, bf16, fp16, fp8).
Peak device_peak(Device device, const std::string& precision);

}  // namespace loom::parallel
