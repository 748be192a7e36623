// Where a tensor's memory lives: the host (cpu) or one CUDA GPU (cuda:N).
//
//   Device d = Device::cuda(1);
//   Device e = Device::parse("cuda:1");  // == d
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

namespace loom {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  constexpr Device() = default;
  static constexpr Device cpu() { return Device(); }
  static Device cuda(int index = 0);
  // "cpu", "cuda" or "cuda:N"; throws loom::Error on anything else.
  static Device parse(const std::string& text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;

  bool operator==(const Device& o) const { return type_ == o.type_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool operator<(const Device& o) const { return type_ != o.type_ ? type_ < o.type_ : index_ < o.index_; }

 private:
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}
  DeviceType type_ = DeviceType::CPU;
  int index_ = 0;
};

std::ostream& operator<<(std::ostream& out, const Device& device);

// Whether this build has the CUDA backend and the machine a usable GPU.
bool cuda_available();
int cuda_device_count();

}  // namespace loom

template <>
struct std::hash<loom::Device> {
  size_t operator()(const loom::Device& d) const {
    return static_cast<size_t>(d.type()) * 1000003u + static_cast<size_t>(d.index());
  }
};
