// Stop signals and StopAgreement: a handled SIGTERM or SIGUSR1 only sets the
// flag (the process lives on), and ranks stop after the same step whichever
// of them was asked, one check after it was.
#include "examples/common/preemption.h"

#include <gtest/gtest.h>

#include <csignal>
#include <thread>
#include <vector>

#include "parallel/comm/thread_group.h"
#include "tests/test_util.h"

namespace loom::examples {
namespace {

TEST(StopSignals, SetTheFlagAndKeepTheFirst) {
  install_stop_handlers();
  install_stop_handlers();  // once per process: a second call changes nothing
  set_stop_signal_for_testing(0);
  EXPECT_EQ(stop_signal(), 0);
  ASSERT_EQ(std::raise(SIGUSR1), 0);  // unhandled, it would end the test binary
  EXPECT_EQ(stop_signal(), SIGUSR1);
  ASSERT_EQ(std::raise(SIGTERM), 0);
  EXPECT_EQ(stop_signal(), SIGUSR1);  // the first one names the stop
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  set_stop_signal_for_testing(0);
}

TEST(StopAgreement, OneProcessStopsAtOnce) {
  bool asked = false;
  StopAgreement stop(nullptr, Device::cpu(), 1, [&] { return asked; });
  EXPECT_FALSE(stop.stop_after(1));
  asked = true;
  EXPECT_TRUE(stop.stop_after(2));
}

// The step at which each of `n` ranks stops, when rank `asked_rank` alone is
// asked to from step `asked_at` on; checks every `every` steps.
std::vector<int64_t> stop_steps(int n, int asked_rank, int64_t asked_at, int64_t every) {
  std::vector<int64_t> stopped(n, -1);
  auto groups = parallel::ThreadGroup::create(n);  // one rank a thread, as mpirun runs one a process
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < n; ++rank)
    ranks.emplace_back([&, rank] {
      int64_t step = 0;
      StopAgreement stop(groups[rank], Device::cpu(), every, [&] { return rank == asked_rank && step >= asked_at; });
      for (step = 1; step <= 100; ++step)
        if (stop.stop_after(step)) break;
      stopped[rank] = step;
    });
  for (std::thread& rank : ranks) rank.join();
  return stopped;
}

TEST(StopAgreement, RanksStopAfterTheSameStep) {
  // Every step: rank 2 asked at step 5 puts its flag in the check started at
  // 5, which every rank reads at 6.
  EXPECT_EQ(stop_steps(3, 2, 5, 1), std::vector<int64_t>(3, 6));
  EXPECT_EQ(stop_steps(3, 0, 5, 1), std::vector<int64_t>(3, 6));
  // Every 4 steps: asked at 5, the flag goes out with the check at 8 and is read at 12.
  EXPECT_EQ(stop_steps(2, 1, 5, 4), std::vector<int64_t>(2, 12));
  // Never asked: no rank stops.
  EXPECT_EQ(stop_steps(2, 1, 1000, 1), std::vector<int64_t>(2, 101));
}

TEST(StopAgreement, RefusesAZeroInterval) {
  EXPECT_THROW_MSG(StopAgreement(nullptr, Device::cpu(), 0), "StopAgreement: checks every 0 steps; expected at least 1");
}

}  // namespace
}  // namespace loom::examples
