#include "loom/version.h"

#include "tensor/backend.h"

namespace loom {

BuildInfo build_info() {
  // The CUDA backend registers itself when it is linked in (tensor/backend.h),
  // so the registry, not a macro, says whether this library has it.
  return {LOOM_VERSION, LOOM_VERSION_MAJOR, LOOM_VERSION_MINOR, LOOM_VERSION_PATCH,
          has_backend(DeviceType::CUDA)};
}

}  // namespace loom
