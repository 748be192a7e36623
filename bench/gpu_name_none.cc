// Stands in for gpu_name_cuda.cc in builds without the CUDA backend.
#include "bench/gpu_name.h"

namespace loom::bench {

std::string gpu_name(Device) { return ""; }

}  // namespace loom::bench
