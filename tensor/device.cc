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
    // Digits only, and the index checked before it is narrowed to an int:
    // cuda:99999999999 is out of range, not device 1215752191.
    const std::string digits = text.substr(5);
    if (digits.find_first_not_of("0123456789") == std::string::npos) {
      LOOM_CHECK(digits.size() <= 9 && std::stoi(digits) < 128, "invalid device '", text,
                 "': a CUDA device index is from 0 to 127");
      return cuda(std::stoi(digits));
    }
  }
  LOOM_FAIL("invalid device '", text, "': expected cpu, cuda or cuda:N");
}

std::string Device::str() const {
  return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& out, const Device& device) { return out << device.str(); }

}  // namespace loom
