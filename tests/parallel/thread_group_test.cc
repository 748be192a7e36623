// The threads backend: every collective for 1 to 4 ranks, against
// hand-computed results (collective_checks.h), plus what only threads can
// show directly (a barrier really waits for everyone).
#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "parallel/comm/thread_group.h"
#include "parallel/trace.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/subgroup_checks.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel::testing {
namespace {

class ThreadGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadGroupTest, AllReduce) { run_ranks(GetParam(), check_all_reduce); }
TEST_P(ThreadGroupTest, AllReduce16Bit) { run_ranks(GetParam(), check_all_reduce_16bit); }
TEST_P(ThreadGroupTest, LargeMessages) { run_ranks(GetParam(), check_large_messages); }
TEST_P(ThreadGroupTest, AllReduceInt64IsExact) { run_ranks(GetParam(), check_all_reduce_int64_exact); }
TEST_P(ThreadGroupTest, Broadcast) { run_ranks(GetParam(), check_broadcast); }
TEST_P(ThreadGroupTest, AllGather) { run_ranks(GetParam(), check_all_gather); }
TEST_P(ThreadGroupTest, ReduceScatter) { run_ranks(GetParam(), check_reduce_scatter); }
TEST_P(ThreadGroupTest, InPlace) { run_ranks(GetParam(), [](ProcessGroup& pg) { check_in_place(pg); }); }
TEST_P(ThreadGroupTest, SendRecv) { run_ranks(GetParam(), check_send_recv); }
TEST_P(ThreadGroupTest, InOrderCompletion) { run_ranks(GetParam(), check_in_order_completion); }
TEST_P(ThreadGroupTest, ReceiveDoesNotWaitForAnEarlierSend) {
  run_ranks(GetParam(), [](ProcessGroup& pg) { check_receive_does_not_wait_for_an_earlier_send(pg); });
}
TEST_P(ThreadGroupTest, OverlappingOps) { run_ranks(GetParam(), check_overlapping_ops); }
TEST_P(ThreadGroupTest, Stats) { run_ranks(GetParam(), check_stats); }
TEST_P(ThreadGroupTest, Split) { run_ranks(GetParam(), check_split); }
TEST_P(ThreadGroupTest, Mesh) { run_ranks(GetParam(), check_mesh); }
TEST_P(ThreadGroupTest, Mismatches) { run_ranks(GetParam(), check_mismatches); }

TEST_P(ThreadGroupTest, BarrierWaitsForEveryRank) {
  const int n = GetParam();
  std::atomic<int> arrived{0};
  run_ranks(n, [&](ProcessGroup& pg) {
    for (int round = 1; round <= 3; ++round) {
      arrived.fetch_add(1);
      pg.barrier()->wait();
      EXPECT_GE(arrived.load(), round * n);  // everybody has counted this round
      pg.barrier()->wait();                  // before anybody counts the next
    }
  });
}

TEST_P(ThreadGroupTest, RankAndSize) {
  const int n = GetParam();
  std::vector<int> seen(n, -1);
  run_ranks(n, [&](ProcessGroup& pg) {
    EXPECT_EQ(pg.size(), n);
    EXPECT_EQ(pg.backend(), "threads");
    EXPECT_EQ(pg.local_rank(), pg.rank());
    seen[pg.rank()] = pg.rank();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(seen[r], r);
}

INSTANTIATE_TEST_SUITE_P(Ranks, ThreadGroupTest, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// all_reduce is reduce-scatter then all-gather over slices; every element must
// be summed exactly once however the slices fall.
TEST(ThreadGroup, AllReduceSlicesCoverEveryElement) {
  for (int n : {2, 3, 5, 8})
    for (int64_t numel : {1, 3, 8, 9, 31}) {
      run_ranks(n, [&](ProcessGroup& pg) {
        Tensor t = ones({numel}, {.dtype = kInt64});
        pg.all_reduce(t)->wait();
        expect_values(t, std::vector<double>(numel, n));
      });
    }
}

TEST(ThreadGroup, RejectsBadArguments) {
  run_ranks(2, [](ProcessGroup& pg) {
    Tensor m = zeros({3, 2});
    EXPECT_THROW_MSG(pg.all_reduce(m.t()), "all_reduce: the tensor must be contiguous (shape [2, 3]");
    EXPECT_THROW_MSG(pg.all_reduce(Tensor()), "all_reduce: the tensor is undefined");
    EXPECT_THROW_MSG(pg.all_reduce(zeros({2}, {.dtype = kBool})), "cannot reduce bool tensors");
    EXPECT_THROW_MSG(pg.all_reduce(zeros({2}, {.dtype = kInt64}), ReduceOp::Avg),
                     "ReduceOp::Avg needs a floating-point tensor, got int64");
    EXPECT_THROW_MSG(pg.broadcast(zeros({2}), 2), "broadcast: root 2 is out of range for a group of 2 ranks");
    EXPECT_THROW_MSG(pg.send(zeros({2}), -1), "send: dst -1 is out of range");
    EXPECT_THROW_MSG(pg.recv(zeros({2}), 0, 40000), "recv: tag 40000 is outside [0, 32767]");
    EXPECT_THROW_MSG(pg.all_gather(zeros({4}, {.dtype = kFloat64}), zeros({2})),
                     "all_gather: the output is float64 but the input is float32");
    EXPECT_THROW_MSG(pg.all_gather(std::vector<Tensor>{zeros({2})}, zeros({2})),
                     "all_gather: expected one output per rank (2), got 1");
    Tensor buffer = zeros({4});
    // In place is a piece inside the whole; a partial overlap is refused before anything is queued.
    EXPECT_THROW_MSG(pg.all_gather(buffer.narrow(0, 1, 2), buffer.narrow(0, 0, 2)),
                     "all_gather: the input overlaps the output without lying inside it");
    EXPECT_THROW_MSG(pg.reduce_scatter(buffer, buffer.narrow(0, 1, 2)),
                     "reduce_scatter: the output overlaps the input without lying inside it");
    // Nothing was queued: the group still works.
    Tensor t = ones({2});
    pg.all_reduce(t)->wait();
    expect_values(t, {2, 2});
  });
}

TEST(ThreadGroup, WritesBumpTheVersion) {
  run_ranks(2, [](ProcessGroup& pg) {
    Tensor t = ones({2});
    uint32_t before = t.version();
    pg.all_reduce(t)->wait();
    EXPECT_GT(t.version(), before);
  });
}

TEST(ThreadGroup, TensorsOnTheAllReduceAreKeptAliveUntilDone) {
  run_ranks(3, [](ProcessGroup& pg) {
    WorkPtr work;
    {
      Tensor t = full({1000}, 1.0);
      work = pg.all_reduce(t);
    }  // the caller's handle is gone; the op holds its own
    work->wait();
    EXPECT_TRUE(work->is_success());
  });
}

// The process group is where communication is traced: every operation that
// succeeds is one span on its process's lane, "rank<r>/comm", subgroups'
// included (rank 1 is rank 0 of its subgroup, and still draws on rank1's).
TEST(ThreadGroup, TracesEachOperationOnItsProcesssLane) {
  trace::clear();
  trace::enable(true);
  run_ranks(2, [](ProcessGroup& pg) {
    pg.all_reduce(ones({4}))->wait();
    Tensor t = ones({2});
    (pg.rank() == 0 ? pg.send(t, 1) : pg.recv(t, 0))->wait();
    std::shared_ptr<ProcessGroup> alone = pg.split(/*color=*/pg.rank());
    ASSERT_EQ(alone->rank(), 0);
    alone->barrier()->wait();
  });
  trace::enable(false);
  const std::vector<std::string> lanes = trace::lane_names();
  std::map<std::string, std::vector<std::string>> spans;  // lane -> operations, in order
  for (const trace::Event& e : trace::events()) {
    ASSERT_EQ(e.category, "communication");
    EXPECT_LE(e.begin_us, e.end_us);
    spans[lanes.at(e.lane)].push_back(e.name);
  }
  using Names = std::vector<std::string>;
  EXPECT_EQ(spans["rank0/comm"], (Names{"all_reduce", "send", "all_gather", "barrier"}));  // split all-gathers
  EXPECT_EQ(spans["rank1/comm"], (Names{"all_reduce", "recv", "all_gather", "barrier"}));
  EXPECT_EQ(spans.size(), 2u);
  trace::clear();
}

}  // namespace
}  // namespace loom::parallel::testing
