// Stands in for gpu_name_cuda.cc in builds without the CUDA backend.
#include "parallel/planner/gpu_name.h"

namespace loom::parallel {

std::string gpu_name(Device) { return ""; }

}  // namespace loom::parallel
