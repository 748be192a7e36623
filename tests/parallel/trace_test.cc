#include "parallel/trace.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/test_util.h"

namespace loom {
namespace {

TEST(Trace, OffRecordsNothing) {
  trace::enable(false);
  trace::clear();
  { trace::Span s("forward", "compute", trace::lane("off")); }
  EXPECT_TRUE(trace::events().empty());
}

TEST(Trace, SpansFromThreadsLandOnTheirLanesAndNest) {
  trace::clear();
  trace::enable(true);
  const int a = trace::lane("worker 0"), b = trace::lane("worker 1");
  EXPECT_EQ(trace::lane("worker 0"), a);  // lanes are named once
  std::thread t([b] { trace::Span s("backward", "compute", b); });
  {
    trace::Span outer("step", "compute", a);
    trace::Span inner("all_reduce", "communication", a);
  }
  t.join();
  trace::enable(false);
  std::vector<trace::Event> events = trace::events();
  ASSERT_EQ(events.size(), 3u);
  const trace::Event* step = nullptr;
  const trace::Event* reduce = nullptr;
  for (const auto& e : events) {
    if (e.name == "step") step = &e;
    if (e.name == "all_reduce") reduce = &e;
    if (e.name == "backward") {
      EXPECT_EQ(e.lane, b);
    }
  }
  ASSERT_TRUE(step && reduce);
  EXPECT_EQ(step->lane, a);
  EXPECT_LE(step->begin_us, reduce->begin_us);  // inner spans sit inside outer ones
  EXPECT_GE(step->end_us, reduce->end_us);
  EXPECT_EQ(reduce->category, "communication");
}

TEST(Trace, WritesChromeTraceJson) {
  trace::clear();
  trace::enable(true);
  trace::set_process(3, "rank 3");
  trace::record("forward", "compute", trace::lane("gpu 0"), 10, 25);
  trace::enable(false);
  const std::string path = ::testing::TempDir() + "/trace.json";
  trace::write_chrome_trace(path);
  std::ifstream in(path);
  nlohmann::json j = nlohmann::json::parse(in);
  bool found = false, named = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "forward") {
      found = true;
      EXPECT_EQ(e["ts"], 10);
      EXPECT_EQ(e["dur"], 15);
      EXPECT_EQ(e["pid"], 3);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "gpu 0") named = true;
  }
  EXPECT_TRUE(found);
  EXPECT_TRUE(named);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

// GPU times are measured from the device's anchor (its first span's mark),
// which may sit on another queue than a span and finish after it: here the
// anchor waits behind milliseconds of matmuls on one queue, and a span on a
// second queue, resolved first, is done long before. events() must wait for
// both marks, not fail with CUDA's "not ready".
TEST(TraceCuda, GpuSpansWaitForAnAnchorOnAnotherQueue) {
  LOOM_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  trace::clear();
  trace::enable(true);
  DeviceQueue busy(gpu), quick(gpu);
  {
    DeviceQueue::Scope on_busy(busy);
    Tensor m = full({2048, 2048}, 1.0 / 2048, {.device = gpu});
    for (int k = 0; k < 16; ++k) m = m.matmul(m);
    trace::Span anchored("after the matmuls", "compute", trace::lane("busy queue"), gpu);
    DeviceQueue::Scope on_quick(quick);
    trace::Span early("nothing", "compute", trace::lane("quick queue"), gpu);
  }  // `early` ends first, so events() resolves it first
  trace::enable(false);
  EXPECT_EQ(trace::events().size(), 2u);
}

}  // namespace
}  // namespace loom
