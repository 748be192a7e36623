// Streams and events: work on two streams ordered by an event gives the right
// result, StreamGuard switches and restores the current stream (per thread),
// events time device work, and synchronize() waits for everything.
#include <gtest/gtest.h>

#include <cstdlib>
#include <thread>

#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"
#include "tensor/host_waits.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using namespace cuda;
using testing::gpu_device;

TEST(CudaStreams, GuardSwitchesAndRestoresTheCurrentStream) {
  LOOM_REQUIRE_CUDA();
  const Stream original = current_stream(0);
  EXPECT_EQ(original, Stream::default_stream(0));
  const Stream side = Stream::from_pool(0);
  EXPECT_NE(side, original);
  {
    StreamGuard guard(side);
    EXPECT_EQ(current_stream(0), side);
    // Another thread still has its own current stream: the default.
    Stream seen_by_other = original;
    std::thread([&] { seen_by_other = current_stream(0); }).join();
    EXPECT_EQ(seen_by_other, Stream::default_stream(0));
  }
  EXPECT_EQ(current_stream(0), original);
}

TEST(CudaStreams, AnEventOrdersWorkAcrossTwoStreams) {
  LOOM_REQUIRE_CUDA();
  const Stream producer = Stream::from_pool(0), consumer = Stream::from_pool(0);
  ASSERT_NE(producer, consumer);
  const int64_t n = 1 << 24;
  Tensor x, y;
  {
    StreamGuard guard(producer);
    x = zeros({n}, {.device = gpu_device()});
    // Enough work that the consumer would see unfinished data without the event.
    for (int i = 0; i < 50; ++i) x.add_(1.0);
  }
  Event produced;
  produced.record(producer);
  produced.wait(consumer);
  {
    StreamGuard guard(consumer);
    y = x * 2.0;
    record_stream(x, consumer);
  }
  Event consumed;
  consumed.record(consumer);
  consumed.synchronize();
  EXPECT_TRUE(consumed.query());
  EXPECT_TRUE(consumer.query());
  EXPECT_EQ(amin(y).item(), 100.0);
  EXPECT_EQ(amax(y).item(), 100.0);
}

TEST(CudaStreams, EventsTimeDeviceWork) {
  LOOM_REQUIRE_CUDA();
  Tensor a = randn({2048, 2048}, {.device = gpu_device()});
  Event start(/*enable_timing=*/true), stop(/*enable_timing=*/true);
  start.record(current_stream(0));
  Tensor c = mm(a, a);
  stop.record(current_stream(0));
  stop.synchronize();
  const float ms = start.elapsed_time(stop);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 10000.0f);
  Event untimed;
  untimed.record(current_stream(0));
  untimed.synchronize();
  EXPECT_THROW_MSG(start.elapsed_time(untimed), "enable_timing");
  Event never;
  EXPECT_TRUE(never.query());
  EXPECT_NO_THROW(never.wait(current_stream(0)));
}

TEST(CudaStreams, OpsReturnBeforeTheWorkIsDoneAndSynchronizeWaits) {
  LOOM_REQUIRE_CUDA();
  // Seen on the H200, 2026-11-26: under memcheck the queue was empty when the ops returned.
  if (std::getenv("LOOM_UNDER_COMPUTE_SANITIZER") != nullptr)
    GTEST_SKIP() << "LOOM_UNDER_COMPUTE_SANITIZER is set: the sanitizer's launches return once the kernel is done";
  Tensor a = randn({4096, 4096}, {.device = gpu_device()});
  synchronize(gpu_device());
  Tensor c = mm(a, a);
  for (int i = 0; i < 10; ++i) c = mm(c, a) * 0.01;
  // About a TFLOP is queued: it cannot be finished yet, but the ops returned.
  EXPECT_FALSE(current_stream(0).query()) << "ops should not wait for the GPU";
  synchronize(gpu_device());
  EXPECT_TRUE(current_stream(0).query());
}

TEST(CudaStreams, HostWaitsCountSynchronisationsAndReadsButNotOps) {
  LOOM_REQUIRE_CUDA();
  Tensor a = randn({256, 256}, {.device = gpu_device()});
  synchronize(gpu_device());
  const int64_t start = host_waits();
  Tensor c = softmax(mm(a, a) + 1.0, 1);
  Tensor total = c.sum();
  EXPECT_EQ(host_waits(), start) << "queuing ops never waits";
  EXPECT_NEAR(total.item(), 256.0, 1e-3);
  EXPECT_EQ(host_waits(), start + 1) << "item() waits once";
  synchronize(gpu_device());
  current_stream(0).synchronize();
  Event done;
  done.record(current_stream(0));
  done.synchronize();
  EXPECT_EQ(host_waits(), start + 4);
}

TEST(CudaStreams, KernelsOnAStreamOfAnotherThreadAreIndependent) {
  LOOM_REQUIRE_CUDA();
  Tensor a = testing::random({1000, 100}, kFloat32, 1);
  Tensor expected = softmax(a, 1);
  Tensor from_thread;
  std::thread worker([&] {
    StreamGuard guard(Stream::from_pool(0));
    from_thread = softmax(testing::gpu(a), 1).cpu();
  });
  worker.join();
  testing::expect_close(from_thread.to(gpu_device()), expected, 1e-5, "softmax from another thread's stream");
}

}  // namespace
}  // namespace loom
