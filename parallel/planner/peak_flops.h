// The dense peak arithmetic rate of a GPU for a training precision, from
// its data sheet, so that a benchmark can report model FLOPs utilisation
// (MFU: the model's FLOPs per second over this peak), the number engineers
// compare across frameworks.
//
//   double peak = parallel::dense_peak_flops("NVIDIA H100 80GB HBM3", "bf16");  // 989.4e12
//
// precision: fp32 (the CUDA cores' FP32, loom's default for float32
// products), tf32, bf16, fp16 (autocast: the tensor cores' 16-bit rate) or
// fp8. 0 for a GPU or precision the table does not know (no MFU then).
#pragma once

#include <string>

namespace loom::parallel {

double dense_peak_flops(const std::string& gpu, const std::string& precision);

}  // namespace loom::parallel
