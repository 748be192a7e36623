// Failures in the threads backend never hang: a rank that never joins, one
// that leaves, one that sends the wrong size. Only the timeout tests use
// short timeouts; nothing else depends on timing.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "parallel/comm/thread_group.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel::testing {
namespace {

ProcessGroupOptions short_timeout() {
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(200);
  return options;
}

std::string error_of(const WorkPtr& work) {
  try {
    work->wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ThreadFailure, RankThatNeverJoinsTimesOutWithTheFacts) {
  std::atomic<int> failed{0};
  run_ranks(3, [&](ProcessGroup& pg) {
    if (pg.rank() == 2) {
      // Joins only after the others have given up: it must fail at once, not wait.
      while (failed.load() < 2) std::this_thread::yield();
      std::string late = error_of(pg.all_reduce(zeros({4})));
      EXPECT_NE(late.find("rank 2: all_reduce #1 (sum, 4 x float32): not run, the process group "
                          "failed earlier"), std::string::npos) << late;
      return;
    }
    WorkPtr stuck = pg.all_reduce(zeros({4}));
    WorkPtr queued = pg.broadcast(zeros({2}), 0);
    std::string error = error_of(stuck);
    failed.fetch_add(1);
    // Whichever rank's clock ran out first, both name themselves, the
    // collective and its number, and the rank that never came.
    EXPECT_NE(error.find(detail::concat("rank ", pg.rank(), ": all_reduce #1 (sum, 4 x float32)")),
              std::string::npos) << error;
    // Rank 2 is missing; rank 1 too if its thread had not started the
    // all_reduce yet when rank 0's clock ran out (a very busy machine).
    EXPECT_TRUE(error.find("timed out after 0.2 s waiting for rank 2 ") != std::string::npos ||
                error.find("timed out after 0.2 s waiting for ranks 1, 2 ") != std::string::npos)
        << error;
    // What was queued behind it fails too, and so does anything later.
    EXPECT_NE(error_of(queued).find("broadcast #2 (root 0, 2 x float32): not run"), std::string::npos);
    EXPECT_NE(error_of(pg.barrier()).find("the process group failed earlier"), std::string::npos);
  }, short_timeout());
}

TEST(ThreadFailure, RecvWithoutASenderTimesOut) {
  run_ranks(2, [](ProcessGroup& pg) {
    if (pg.rank() != 1) return;
    std::string error = error_of(pg.recv(zeros({3}), 0, 5));
    EXPECT_NE(error.find("rank 1: recv #1 from rank 0 (tag 5, 3 x float32): timed out after 0.2 s: "
                         "no message from rank 0 with tag 5 arrived"),
              std::string::npos) << error;
  }, short_timeout());
}

TEST(ThreadFailure, TimeoutComesFromTheEnvironment) {
  ASSERT_EQ(setenv("LOOM_COMM_TIMEOUT_SECONDS", "0.25", 1), 0);
  ProcessGroupOptions options;  // the default reads the variable
  EXPECT_EQ(options.timeout, std::chrono::milliseconds(250));
  auto groups = ThreadGroup::create(2, options);
  std::string error = error_of(groups[0]->barrier());
  EXPECT_NE(error.find("rank 0: barrier #1: timed out after 0.25 s waiting for rank 1"), std::string::npos)
      << error;

  ASSERT_EQ(setenv("LOOM_COMM_TIMEOUT_SECONDS", "soon", 1), 0);
  EXPECT_THROW_MSG(ProcessGroupOptions(),
                   "LOOM_COMM_TIMEOUT_SECONDS: expected a positive number of seconds, from 0.001 to 2592000 (30 days), got 'soon'");
  ASSERT_EQ(setenv("LOOM_COMM_TIMEOUT_SECONDS", "-3", 1), 0);
  EXPECT_THROW_MSG(default_timeout(), "got '-3'");
  // Values the clock cannot hold are refused, not bent: 1e10 s used to fail
  // the first collective at once, 1e16 s to become 1 ms.
  for (const char* huge : {"1e10", "1e16", "2592001"}) {
    ASSERT_EQ(setenv("LOOM_COMM_TIMEOUT_SECONDS", huge, 1), 0);
    EXPECT_THROW_MSG(default_timeout(), "from 0.001 to 2592000 (30 days), got '" + std::string(huge) + "'");
  }
  ASSERT_EQ(setenv("LOOM_COMM_TIMEOUT_SECONDS", "0.0004", 1), 0);
  EXPECT_THROW_MSG(default_timeout(), "got '0.0004'");
  ASSERT_EQ(setenv("LOOM_COMM_TIMEOUT_SECONDS", "2592000", 1), 0);
  EXPECT_EQ(default_timeout(), std::chrono::hours(24 * 30));
  ASSERT_EQ(unsetenv("LOOM_COMM_TIMEOUT_SECONDS"), 0);
  EXPECT_EQ(default_timeout(), std::chrono::minutes(5));
}

TEST(ThreadFailure, WrongSizeIsReportedByEveryRank) {
  run_ranks(3, [](ProcessGroup& pg) {
    Tensor t = ones({pg.rank() == 2 ? 5 : 4});
    std::string error = error_of(pg.all_reduce(t));
    EXPECT_NE(error.find(detail::concat("rank ", pg.rank(), ": all_reduce #1 (sum, ", t.numel(),
                                        " x float32): the ranks disagree on the number of "
                                        "elements: 4 on ranks 0, 1; 5 on rank 2")),
              std::string::npos) << error;
    expect_values(t, std::vector<double>(t.numel(), 1));  // nothing was exchanged
  });
}

// A rank whose group is destroyed is gone for good, like a process that exited.
TEST(ThreadFailure, RankThatLeavesMakesThePeersFailNotHang) {
  auto groups = ThreadGroup::create(3, test_options());
  WorkPtr w0 = groups[0]->all_reduce(zeros({4}));
  WorkPtr w1 = groups[1]->all_reduce(zeros({4}));
  groups[2].reset();
  for (const WorkPtr& w : {w0, w1}) {
    std::string error = error_of(w);
    EXPECT_NE(error.find("all_reduce #1 (sum, 4 x float32): rank 2 has left the group"),
              std::string::npos) << error;
  }
}

TEST(ThreadFailure, WaitRethrowsEveryTime) {
  run_ranks(2, [](ProcessGroup& pg) {
    WorkPtr w = pg.all_reduce(zeros({pg.rank() + 1}));
    EXPECT_THROW_MSG(w->wait(), "disagree on the number of elements");
    EXPECT_THROW_MSG(w->wait(), "disagree on the number of elements");
    EXPECT_TRUE(w->is_completed());
    EXPECT_FALSE(w->is_success());
  });
}

}  // namespace
}  // namespace loom::parallel::testing
