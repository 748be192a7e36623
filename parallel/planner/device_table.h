// The GPUs loom knows by their data sheets: memory, dense peak FLOP/s per
// training precision, and the link between two devices of one node. MFU
// (mfu.h) divides by these peaks; the planner (planner.h) plans for them.
//
//   const parallel::DeviceSpec* h100 = parallel::find_gpu("NVIDIA H100 80GB HBM3");  // or "h100-sxm"
//   h100->peak_flops("bf16");                                                         // 989.4e12
//
// Peaks are dense (no 2:4 sparsity). Links are what collectives achieve, not
// the theoretical rate: NVLink 4 about 370 GB/s per direction in NCCL's
// all-reduce, NVLink 3 about 230, PCIe 5 and 4 x16 about 50 and 25.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/planner/step_time.h"

namespace loom::parallel {

struct DeviceSpec {
  std::string kind;  // the table's key: "h100-sxm"
  std::string name;  // "NVIDIA H100 SXM 80GB"
  int64_t memory_bytes = 0;
  // Dense peak FLOP/s; 0: not supported. fp32 is the CUDA cores' rate (loom's
  // default for float32 products), tf32 and bf16 (also fp16) the tensor cores'.
  double fp32 = 0, tf32 = 0, bf16 = 0, fp8 = 0;
  Link node_link;  // between two devices of one node
  // The peak for "fp32", "tf32", "bf16", "fp16" or "fp8"; throws loom::Error
  // for another name or for one the device cannot run.
  double peak_flops(const std::string& precision) const;
};

// The known GPU kinds: h100-sxm, h100-pcie, h200, a100-sxm.
const std::vector<DeviceSpec>& gpu_table();

// A GPU by its key or its CUDA name ("NVIDIA H100 80GB HBM3" is the SXM
// card); nullptr when the table has none.
const DeviceSpec* find_gpu(const std::string& kind_or_name);

// The dense peak of a GPU (by CUDA name) for a precision; 0 when the table
// does not know the GPU or the precision (then no MFU is reported).
double dense_peak_flops(const std::string& gpu, const std::string& precision);

}  // namespace loom::parallel
