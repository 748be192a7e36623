// The name of the GPU a benchmark ran on, for its JSON line, so that a
// recorded number says which card gave it.
//
//   std::printf("\"gpu\": \"%s\"", parallel::gpu_name(device).c_str());  // "NVIDIA H100 80GB HBM3"
#pragma once

#include <string>

#include "tensor/device.h"

namespace loom::parallel {

// The CUDA device's name; "" for the CPU and in builds without CUDA.
std::string gpu_name(Device device);

}  // namespace loom::parallel
