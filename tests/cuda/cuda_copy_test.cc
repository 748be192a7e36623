// Copies in every direction — host to device, device to host, on one device,
// across devices — with dtype conversion and strided sources and
// destinations, through .to(), .copy_(), clone() and cat().
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using testing::expect_equal;
using testing::gpu;
using testing::gpu_device;
using testing::non_contiguous;
using testing::random;

const std::vector<DType>& dtypes() {
  static const std::vector<DType> d = {kBool, kUInt8, kInt64, kFloat32, kFloat64};
  return d;
}

// Small integers: exact in every dtype.
Tensor values_for(DType dtype, uint64_t seed) {
  return (random({19, 23}, kFloat64, seed, 0, 100)).to(kInt64).to(dtype);
}

TEST(CudaCopy, HostToDeviceAndBackWithEveryConversionAndLayout) {
  LOOM_REQUIRE_CUDA();
  uint64_t seed = 1;
  for (DType from : dtypes())
    for (DType to : dtypes()) {
      Tensor x = values_for(from, ++seed);
      const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to);
      Tensor expected = x.to(to);
      // host -> device: dense and strided sources, converting on the way.
      expect_equal(x.to(gpu_device(), to).cpu(), expected, "h2d " + what);
      expect_equal(non_contiguous(x).to(gpu_device(), to).cpu(), expected, "h2d strided source " + what);
      expect_equal(x.t().to(gpu_device(), to).cpu(), expected.t().contiguous(), "h2d transposed source " + what);
      // device -> host: dense and strided sources.
      Tensor d = gpu(x);
      expect_equal(d.to(Device::cpu(), to), expected, "d2h " + what);
      expect_equal(non_contiguous(d).to(Device::cpu(), to), expected, "d2h strided source " + what);
      // Strided destinations on either side, through copy_.
      Tensor host_dst = zeros({19, 46}, {.dtype = to}).slice(1, 0, 46, 2);
      host_dst.copy_(d);
      expect_equal(host_dst.contiguous(), expected, "d2h into a strided host view " + what);
      Tensor gpu_dst = zeros({19, 46}, {.dtype = to, .device = gpu_device()}).slice(1, 1, 46, 2);
      gpu_dst.copy_(x);
      expect_equal(gpu_dst.cpu(), expected, "h2d into a strided device view " + what);
      // device -> device on one GPU.
      Tensor same = zeros({19, 23}, {.dtype = to, .device = gpu_device()});
      same.copy_(non_contiguous(d));
      expect_equal(same.cpu(), expected, "d2d strided " + what);
    }
}

TEST(CudaCopy, BroadcastCopiesCloneContiguousAndCat) {
  LOOM_REQUIRE_CUDA();
  Tensor row = random({23}, kFloat32, 3);
  Tensor dst = zeros({19, 23}, {.device = gpu_device()});
  dst.copy_(gpu(row));  // a stride-0 source
  expect_equal(dst.cpu(), row.expand({19, 23}).contiguous(), "broadcast copy_");
  Tensor x = random({19, 23}, kFloat32, 4);
  expect_equal(gpu(x).t().contiguous().cpu(), x.t().contiguous(), "contiguous of a transpose");
  expect_equal(gpu(x).t().clone().cpu(), x.t().clone(), "clone of a transpose");
  Tensor y = random({19, 5}, kFloat64, 5);
  expect_equal(cat({gpu(x), gpu(y)}, 1).cpu(), cat({x, y}, 1), "cat with promotion");
  expect_equal(stack({gpu(x), gpu(x) * 2.0}, 0).cpu(), stack({x, x * 2.0}, 0), "stack");
}

TEST(CudaCopy, LargeCopiesBothWays) {
  LOOM_REQUIRE_CUDA();
  Tensor big = random({(1 << 24) + 5}, kFloat32, 6);
  Tensor round_trip = gpu(big).cpu();
  EXPECT_EQ(testing::max_rel_error(round_trip, big), 0.0);
  Tensor pinned = empty_pinned(big.shape());
  pinned.copy_(big);
  EXPECT_EQ(testing::max_rel_error(pinned.to(gpu_device()).cpu(), big), 0.0);
}

TEST(CudaCopy, AcrossDevices) {
  LOOM_REQUIRE_CUDA();
  if (cuda_device_count() < 2) {
    // One GPU: the cross-device path cannot run; copies between tensors of
    // cuda:0 exercise the same staging code on one device instead.
    std::cout << "only one GPU: cross-device copies are checked on cuda:0 alone\n";
    RecordProperty("cross_device", "not run: one GPU");
  }
  const Device other = cuda_device_count() >= 2 ? Device::cuda(1) : gpu_device();
  for (DType from : dtypes())
    for (DType to : {kInt64, kFloat32}) {
      Tensor x = values_for(from, 7);
      Tensor on_first = gpu(x);
      const std::string what = std::string(dtype_name(from)) + " -> " + dtype_name(to) + " on " + other.str();
      expect_equal(on_first.to(other, to).cpu(), x.to(to), "dense " + what);
      expect_equal(non_contiguous(on_first).to(other, to).cpu(), x.to(to), "strided " + what);
      Tensor dst = zeros({19, 46}, {.dtype = to, .device = other}).slice(1, 0, 46, 2);
      dst.copy_(on_first);
      expect_equal(dst.cpu(), x.to(to), "into a strided view " + what);
    }
}

}  // namespace
}  // namespace loom
