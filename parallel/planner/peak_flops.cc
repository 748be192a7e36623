#include "parallel/planner/peak_flops.h"

namespace loom::parallel {
namespace {

struct Peaks {
  double fp32, tf32, half, fp8;  // FLOP/s, dense (no 2:4 sparsity)
};

// NVIDIA's H100 data sheet: the SXM card (H200 has its compute) and PCIe.
constexpr Peaks kH100Sxm{66.9e12, 494.7e12, 989.4e12, 1978.9e12};
constexpr Peaks kH100Pcie{51.2e12, 378.0e12, 756.0e12, 1513.0e12};

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

double dense_peak_flops(const std::string& gpu, const std::string& precision) {
  const Peaks* peaks = nullptr;
  if (has(gpu, "H200") || has(gpu, "H100 80GB HBM3") || has(gpu, "H100 SXM"))
    peaks = &kH100Sxm;
  else if (has(gpu, "H100 PCIe"))
    peaks = &kH100Pcie;
  if (peaks == nullptr) return 0;
  if (precision == "fp32") return peaks->fp32;
  if (precision == "tf32") return peaks->tf32;
  if (precision == "bf16" || precision == "fp16") return peaks->half;
  if (precision == "fp8") return peaks->fp8;
  return 0;
}

}  // namespace loom::parallel
