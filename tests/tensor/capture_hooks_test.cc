// The two hooks a device-graph capture (tensor/device_graph.h) sets on its
// thread, checked without a GPU: host waits become errors that say what
// waited, and device draws go to the capture (relative to each replay's
// offset origin) while host draws and checkpoint replays stay as they were.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "tensor/generator.h"
#include "tensor/host_waits.h"
#include "tests/test_util.h"

namespace loom {
namespace {

TEST(HostWaitsForbidden, AWaitInsideIsAnErrorNamingItAndWhatForbadeIt) {
  const int64_t before = host_waits();
  note_host_wait("a test's wait");
  EXPECT_EQ(host_waits(), before + 1);
  {
    HostWaitsForbidden forbidden("capturing a CUDA graph on cuda:0");
    try {
      note_host_wait("item()");
      FAIL() << "the wait was allowed";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("item()"), std::string::npos) << message;
      EXPECT_NE(message.find("capturing a CUDA graph on cuda:0"), std::string::npos) << message;
    }
    EXPECT_EQ(host_waits(), before + 1) << "a refused wait did not happen";
    count_host_wait();  // the noexcept count (allocator paths a capture never reaches) still counts
  }
  note_host_wait("after the scope");  // allowed again
  EXPECT_EQ(host_waits(), before + 3);
}

TEST(HostWaitsForbidden, IsPerThread) {
  HostWaitsForbidden forbidden("capturing");
  bool other_thread_waited = false;
  std::thread other([&] {
    note_host_wait("another thread's wait");
    other_thread_waited = true;
  });
  other.join();
  EXPECT_TRUE(other_thread_waited);
}

// Stands in for a graph: hands out relative draws with its own state pointer.
class FakeGraph final : public DrawSink {
 public:
  Draw take(Generator& generator) override {
    takers.push_back(&generator);
    Draw d;
    d.offset = draws++;
    d.device_state = &state[0];
    return d;
  }
  uint64_t state[2] = {0, 0};
  uint64_t draws = 0;
  std::vector<Generator*> takers;
};

TEST(DrawCapture, DeviceDrawsGoToTheCaptureAndLeaveTheGeneratorAlone) {
  Generator g(5);
  g.draw();  // offset 0 taken before the capture
  FakeGraph graph;
  {
    DrawCapture capture(graph);
    const Draw a = g.draw(), b = g.draw();
    EXPECT_EQ(a.device_state, &graph.state[0]);
    EXPECT_EQ(a.offset, 0u);
    EXPECT_EQ(b.offset, 1u);
    EXPECT_EQ(graph.takers, (std::vector<Generator*>{&g, &g}));
    // A host draw runs now, not at replays: it takes from the generator.
    g.next_u64();
  }
  EXPECT_EQ(g.state().offset, 2u) << "one draw before, one host draw inside; the captured draws are the graph's";
  const Draw after = g.draw();
  EXPECT_EQ(after.device_state, nullptr);
  EXPECT_EQ(after.offset, 2u);
}

TEST(DrawCapture, ACheckpointRecordsTheCapturedDrawsAndReplaysThem) {
  Generator g(5);
  FakeGraph graph;
  DrawCapture capture(graph);
  std::vector<Draw> log;
  {
    DrawRecording record(log);
    g.draw();
    g.draw();
  }
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[1].offset, 1u);
  EXPECT_EQ(log[1].device_state, &graph.state[0]);
  {
    DrawReplay replay(log);  // the backward's second run of the segment draws the forward's numbers
    EXPECT_EQ(g.draw().offset, 0u);
    EXPECT_EQ(g.draw().offset, 1u);
  }
  EXPECT_EQ(graph.draws, 2u) << "a replay takes nothing new from the capture";
}

TEST(Generator, ReserveTakesConsecutiveOffsets) {
  Generator g(1);
  g.draw();
  EXPECT_EQ(g.reserve(5), 1u);
  EXPECT_EQ(g.draw().offset, 6u);
}

}  // namespace
}  // namespace loom
