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

#include <new>
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

// Makes cuda:index current for a scope, then restores the device the thread
// had chosen before. A thread that never chose one (through a guard or
// set_thread_device) is left on cuda:index: cudaGetDevice reports cuda:0 for
// it without a context there, and since CUDA 12 setting a device creates its
// context, so restoring would give every rank of a one-GPU-per-rank job a
// context, and memory, on GPU 0.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);  // throws loom::Error if cuda:index is unusable
  // For code that must not throw (deallocation): on a CUDA error the device
  // stays as it was and ok() is false.
  DeviceGuard(int index, std::nothrow_t) noexcept;
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  bool ok() const { return ok_; }

 private:
  int previous_ = -1;  // -1: nothing to restore
  bool ok_ = true;
};

// Makes cuda:index the calling thread's device from now on (no scope); later
// guards restore it. Use it rather than cudaSetDevice, which DeviceGuard
// cannot tell from a thread that never chose a device.
void set_thread_device(int index);

}  // namespace loom::cuda
