// How loom behaves with and without a usable GPU. These tests never skip: on
// a machine with the CUDA toolkit but no driver or GPU (CI), they check that
// CUDA's absence is reported cleanly; on a GPU machine, that the device is
// there and bad device indices are clear errors.
#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

TEST(CudaDevice, AvailabilityAndCountAgreeAndNeverCrash) {
  const int count = cuda_device_count();
  EXPECT_GE(count, 0);
  EXPECT_EQ(cuda_available(), count > 0);
  EXPECT_EQ(cuda_device_count(), count);  // stable across calls
}

TEST(CudaDevice, UnusableDeviceIsAClearError) {
  const int count = cuda_device_count();
  if (count == 0) {
    // Built without CUDA: "built without the CUDA backend"; built with it but
    // no GPU: "cuda:0 is not available: this machine has no usable CUDA device".
    try {
      zeros({2}, {.device = Device::cuda(0)});
      ADD_FAILURE() << "making a tensor on cuda:0 without a GPU did not throw";
    } catch (const Error& e) {
      const std::string message = e.what();
      std::cout << "without a GPU, a cuda tensor is this error: " << message << "\n";
      EXPECT_TRUE(message.find("not available") != std::string::npos ||
                  message.find("built without the CUDA backend") != std::string::npos)
          << message;
    }
  } else {
    EXPECT_THROW_MSG(zeros({2}, {.device = Device::cuda(count)}),
                     "cuda:" + std::to_string(count) + " is not available");
    EXPECT_NO_THROW(zeros({2}, {.device = Device::cuda(0)}));
  }
}

TEST(CudaDevice, PinnedMemoryIsPinnedOnlyWithAGpu) {
  Tensor staging = empty_pinned({16, 4});
  EXPECT_TRUE(staging.device().is_cpu());
  EXPECT_EQ(is_pinned(staging), cuda_available());
  EXPECT_FALSE(is_pinned(zeros({3})));
  staging.fill_(2.5);
  EXPECT_EQ(sum(staging).item(), 2.5 * 64);
  EXPECT_THROW_MSG(empty_pinned({2}, {.device = Device::cuda(0)}), "empty_pinned: pinned memory is host memory");
}

TEST(CudaDevice, SynchronizeIsANoOpOnTheCpu) { EXPECT_NO_THROW(synchronize(Device::cpu())); }

}  // namespace
}  // namespace loom
