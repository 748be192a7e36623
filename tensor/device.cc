#include "tensor/device.h"

#include <cstdlib>

#include "tensor/error.h"

namespace loom {

Device Device::cuda(int index) {
  LOOM_CHECK(index >= 0 && index < 128, "Device::cuda: invalid device index ", index);
  return Device(DeviceType::CUDA, index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    char* end = nullptr;
    long index = std::strtol(text.c_str() + 5, &end, 10);
    if (*end == '\0') return cuda(static_cast<int>(index));
  }
  LOOM_FAIL("invalid device '", text, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

}  // namespace loom
