#include "parallel/planner/device_table.h"

#include <algorithm>

#include "tensor/error.h"

namespace loom::parallel {
namespace {

constexpr int64_t kGB = 1000LL * 1000 * 1000;

// NVIDIA's data sheets: H100 SXM5 and PCIe, H200 (the H100 SXM's compute
// with 141 GB), A100 80GB SXM4 (no FP8).
const std::vector<DeviceSpec> kGpus = {
    {"h100-sxm", "NVIDIA H100 SXM 80GB", 80 * kGB, 66.9e12, 494.7e12, 989.4e12, 1978.9e12, {370e9, 5e-6}},
    {"h100-pcie", "NVIDIA H100 PCIe 80GB", 80 * kGB, 51.2e12, 378.0e12, 756.0e12, 1513.0e12, {50e9, 10e-6}},
    {"h200", "NVIDIA H200 141GB", 141 * kGB, 66.9e12, 494.7e12, 989.4e12, 1978.9e12, {370e9, 5e-6}},
    {"a100-sxm", "NVIDIA A100 SXM 80GB", 80 * kGB, 19.5e12, 156e12, 312e12, 0, {230e9, 5e-6}},
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The peak for a precision; -1 for an unknown precision name.
double peak_of(const DeviceSpec& d, const std::string& precision) {
  if (precision == "fp32") return d.fp32;
  if (precision == "tf32") return d.tf32;
  if (precision == "bf16" || precision == "fp16") return d.bf16;
  if (precision == "fp8") return d.fp8;
  return -1;
}

}  // namespace

double DeviceSpec::peak_flops(const std::string& precision) const {
  const double peak = peak_of(*this, precision);
  LOOM_CHECK(peak != -1, "precision '", precision, "' is none of fp32, tf32, bf16, fp16, fp8");
  LOOM_CHECK(peak > 0, name, " has no ", precision, " rate");
  return peak;
}

const std::vector<DeviceSpec>& gpu_table() { return kGpus; }

const DeviceSpec* find_gpu(const std::string& kind_or_name) {
  for (const DeviceSpec& d : kGpus)
    if (kind_or_name == d.kind) return &d;
  // CUDA's names: "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100-SXM4-80GB".
  const std::string& n = kind_or_name;
  if (contains(n, "H200")) return &kGpus[2];
  if (contains(n, "H100 PCIe")) return &kGpus[1];
  if (contains(n, "H100 80GB HBM3") || contains(n, "H100 SXM")) return &kGpus[0];
  if (contains(n, "A100") && contains(n, "SXM")) return &kGpus[3];
  return nullptr;
}

double dense_peak_flops(const std::string& gpu, const std::string& precision) {
  const DeviceSpec* d = find_gpu(gpu);
  return d == nullptr ? 0 : std::max(0.0, peak_of(*d, precision));
}

}  // namespace loom::parallel
