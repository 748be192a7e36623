// The machine's GPUs as the CUDA backend sees them: how many there are (0,
// without crashing, on a machine with the toolkit but no driver or GPU), their
// properties, and DeviceGuard, which makes one of them current for a scope.
//
//   int n = cuda::device_count();          // never throws
//   cuda::check_device(1);                 // loom::Error if cuda:1 does not exist
//   {
//     cuda::DeviceGuard guard(1);          // CUDA calls in this scope act on cuda:1
//     ...
//   }                                      // the previous current device is back
#pragma once

#include <string>

struct cudaDeviceProp;

namespace loom::cuda {

// Number of usable GPUs; 0 when the driver or the GPU is missing.
int device_count();
// Why device_count() is 0, in CUDA's words ("" when there are GPUs).
const std::string& no_device_reason();
// Throws loom::Error naming the device and the reason when cuda:index is unusable.
void check_device(int index);

// Properties of cuda:index (cached after the first call).
const cudaDeviceProp& device_properties(int index);
int multiprocessor_count(int index);

class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;  // -1: unchanged
};

}  // namespace loom::cuda
