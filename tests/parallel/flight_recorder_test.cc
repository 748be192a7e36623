// The flight recorder (parallel/comm/flight_recorder.h): a bounded ring of
// the last operations that every process group records, and the record it
// writes on a failure, on a signal or on request, which
// tools/flight_record.py reads. Ranks are threads here; mpi_failure_test
// stops a rank of a real mpirun job. This binary runs with
// LOOM_FLIGHT_RECORDER_ENTRIES=64 (BUILD).
#include <sys/stat.h>

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "parallel/comm/flight_recorder.h"
#include "tensor/file_io.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {
namespace {

using json = nlohmann::json;

Op op_numbered(int64_t seq) {
  Op op(OpKind::AllReduce);
  op.seq = seq;
  op.input = op.output = ones({3});
  op.issued_at = std::chrono::steady_clock::now();
  return op;
}

std::vector<int64_t> seqs(const std::vector<FlightEntry>& entries) {
  std::vector<int64_t> out;
  for (const FlightEntry& e : entries) out.push_back(e.seq);
  return out;
}

std::vector<FlightState> states(const std::vector<FlightEntry>& entries) {
  std::vector<FlightState> out;
  for (const FlightEntry& e : entries) out.push_back(e.state);
  return out;
}

// A new empty folder under the test's temporary folder, made the one records go to.
std::string records_go_to(const std::string& name) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  mkdir(dir.c_str(), 0755);
  setenv("LOOM_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
  return dir;
}

json read_record(const std::string& path) { return json::parse(read_file(path, "flight record", 1 << 26)); }

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Rank `rank` of group `name` in a record: its index in "groups", or -1.
int group_index(const json& record, const std::string& name, int rank) {
  for (size_t i = 0; i < record["groups"].size(); ++i)
    if (record["groups"][i]["name"] == name && record["groups"][i]["rank"] == rank) return static_cast<int>(i);
  return -1;
}

std::vector<json> entries_of(const json& record, int group) {
  std::vector<json> out;
  for (const json& e : record["entries"])
    if (e["group"] == group) out.push_back(e);
  return out;
}

std::string run_tool(const std::string& args) {
  const std::string tool =
      std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/tools/flight_record.py";
  std::string output;
  FILE* pipe = popen(("python3 " + tool + " " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return "popen failed";
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  std::printf("---- flight_record.py %s (status %d) ----\n%s", args.c_str(), status, output.c_str());
  return output;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(FlightRecorder, KeepsTheLastEntriesInOrder) {
  FlightRecorder recorder(4);
  const int group = recorder.add_group({"world", "threads", 2, 0, 0, ""});
  std::vector<uint64_t> ids;
  for (int64_t seq = 1; seq <= 6; ++seq) ids.push_back(recorder.issued(group, op_numbered(seq)));
  EXPECT_EQ(ids, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  recorder.started(ids[4]);
  recorder.completed(ids[4]);
  recorder.started(ids[5]);
  recorder.completed(ids[0]);  // overwritten by #5: changes nothing
  const std::vector<FlightEntry> entries = recorder.entries();
  EXPECT_EQ(recorder.recorded(), 6u);
  EXPECT_EQ(seqs(entries), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(states(entries), (std::vector<FlightState>{FlightState::Queued, FlightState::Queued,
                                                       FlightState::Completed, FlightState::Started}));
  EXPECT_EQ(entries[2].input_numel, 3);
  EXPECT_NE(entries[2].finished_at, FlightEntry::Clock::time_point());
  EXPECT_EQ(entries[3].finished_at, FlightEntry::Clock::time_point());  // not yet
}

TEST(FlightRecorder, AFailureKeepsItsReason) {
  FlightRecorder recorder(8);
  const int group = recorder.add_group({"world", "threads", 2, 1, 1, ""});
  const uint64_t id = recorder.issued(group, op_numbered(1));
  recorder.started(id);
  recorder.failed(id, "rank 1: all_reduce #1 (sum, 3 x float32): timed out");
  recorder.group_failed(group, "the first reason");
  recorder.group_failed(group, "a later one");
  recorder.rename_group(group, {"world/split0.color0", "threads", 2, 1, 1, ""});
  EXPECT_EQ(recorder.entries()[0].state, FlightState::Failed);
  EXPECT_EQ(recorder.entries()[0].error, "rank 1: all_reduce #1 (sum, 3 x float32): timed out");
  EXPECT_EQ(recorder.groups()[0].name, "world/split0.color0");
  EXPECT_EQ(recorder.groups()[0].failure, "the first reason");  // the cause, not what followed
}

TEST(FlightRecorder, ZeroEntriesRecordNothing) {
  FlightRecorder recorder(0);
  EXPECT_FALSE(recorder.enabled());
  EXPECT_EQ(recorder.issued(recorder.add_group({"world", "threads", 1, 0, 0, ""}), op_numbered(1)), 0u);
  recorder.completed(0);
  EXPECT_TRUE(recorder.entries().empty());
}

TEST(FlightRecorder, TakesItsSizeFromTheEnvironmentWithinARange) {
  EXPECT_EQ(flight_recorder_entries(nullptr), 2048u);
  EXPECT_EQ(flight_recorder_entries(""), 2048u);
  EXPECT_EQ(flight_recorder_entries("0"), 0u);
  EXPECT_EQ(flight_recorder_entries("1000000"), 1000000u);
  for (const char* bad : {"-1", "1e3", " 5", "5 ", "abc", "1000001", "99999999999999999999999"})
    EXPECT_THROW_MSG(flight_recorder_entries(bad), std::string("LOOM_FLIGHT_RECORDER_ENTRIES: expected a whole number "
                                                               "of operations from 0 (off) to 1000000, got '") +
                                                       bad + "'");
  EXPECT_EQ(FlightRecorder::get().capacity(), 64u);  // BUILD sets LOOM_FLIGHT_RECORDER_ENTRIES=64
}

// Every operation of every rank, with what the tool needs to name it.
TEST(FlightRecorder, ProcessGroupsRecordEveryOperation) {
  std::string name;
  run_ranks(2, [&](ProcessGroup& pg) {
    if (pg.rank() == 0) name = pg.name();
    pg.all_reduce(ones({5}), ReduceOp::Max)->wait();
    pg.broadcast(ones({2}), 1)->wait();
    if (pg.rank() == 0) pg.send(ones({3}, {.dtype = kInt64}), 1, 7)->wait();
    if (pg.rank() == 1) pg.recv(zeros({3}, {.dtype = kInt64}), 0, 7)->wait();
    pg.all_gather(zeros({4}), ones({2}))->wait();
    pg.barrier()->wait();
  });
  const json record = json::parse(FlightRecorder::get().to_json("request"));
  EXPECT_EQ(record["format"], "loom flight record 1");
  EXPECT_EQ(record["reason"], "request");
  EXPECT_EQ(record["capacity"], 64);
  for (int rank : {0, 1}) {
    const int g = group_index(record, name, rank);
    ASSERT_GE(g, 0) << "rank " << rank << " of " << name;
    EXPECT_EQ(record["groups"][g]["backend"], "threads");
    EXPECT_EQ(record["groups"][g]["size"], 2);
    EXPECT_EQ(record["groups"][g]["failure"], "");
    const std::vector<json> entries = entries_of(record, g);
    ASSERT_EQ(entries.size(), 5u);
    EXPECT_EQ(entries[0]["op"], "all_reduce");
    EXPECT_EQ(entries[0]["seq"], 1);
    EXPECT_EQ(entries[0]["reduce"], "max");
    EXPECT_EQ(entries[0]["input_numel"], 5);
    EXPECT_EQ(entries[0]["dtype"], "float32");
    EXPECT_EQ(entries[1]["op"], "broadcast");
    EXPECT_EQ(entries[1]["root"], 1);
    EXPECT_EQ(entries[2]["op"], rank == 0 ? "send" : "recv");
    EXPECT_EQ(entries[2]["seq"], 1);  // sends and receives have their own numbers
    EXPECT_EQ(entries[2]["peer"], 1 - rank);
    EXPECT_EQ(entries[2]["tag"], 7);
    EXPECT_EQ(entries[2]["dtype"], "int64");
    EXPECT_EQ(entries[3]["op"], "all_gather");
    EXPECT_EQ(entries[3]["seq"], 3);
    EXPECT_EQ(entries[3]["output_numel"], 4);
    EXPECT_EQ(entries[4]["op"], "barrier");
    for (const json& e : entries) {
      EXPECT_EQ(e["state"], "completed") << e.dump();
      ASSERT_TRUE(e["issued_us"].is_number() && e["started_us"].is_number() && e["finished_us"].is_number());
      EXPECT_LE(e["issued_us"].get<int64_t>(), e["started_us"].get<int64_t>());
      EXPECT_LE(e["started_us"].get<int64_t>(), e["finished_us"].get<int64_t>());
    }
  }
}

TEST(FlightRecorder, TheRingHoldsTheLastOperationsOnly) {
  FlightRecorder& recorder = FlightRecorder::get();
  const uint64_t before = recorder.recorded();
  run_ranks(1, [](ProcessGroup& pg) {
    for (int i = 0; i < 100; ++i) pg.barrier()->wait();
  });
  EXPECT_EQ(recorder.recorded(), before + 100);
  const std::vector<FlightEntry> entries = recorder.entries();
  ASSERT_EQ(entries.size(), 64u);
  EXPECT_EQ(entries.front().seq, 37);  // barriers 37..100
  EXPECT_EQ(entries.back().seq, 100);
  for (size_t i = 1; i < entries.size(); ++i) EXPECT_EQ(entries[i].id, entries[i - 1].id + 1);
}

// Ranks 0 and 1 wait in all_reduce #2; rank 2 never calls it. The rank whose
// clock runs out writes the process's record (every rank of a threads job
// is in it), and the tool names rank 2.
TEST(FlightRecorder, ATimeoutWritesTheRecordThatNamesTheMissingRank) {
  const std::string dir = records_go_to("timeout");
  ProcessGroupOptions options;
  options.timeout = std::chrono::milliseconds(300);
  std::string name;
  std::atomic<int> issued{0}, failed{0};
  run_ranks(3, [&](ProcessGroup& pg) {
    if (pg.rank() == 0) name = pg.name();
    pg.all_reduce(ones({4}))->wait();
    if (pg.rank() == 2) {
      while (failed.load() < 2) std::this_thread::yield();  // stuck elsewhere until the others give up
      return;
    }
    // Rank 0 issues after rank 1 has, so the record holds both whichever clock runs out first.
    if (pg.rank() == 0)
      while (issued.load() < 1) std::this_thread::yield();
    WorkPtr work = pg.all_reduce(ones({4}));
    issued.fetch_add(1);
    EXPECT_THROW_MSG(work->wait(), "all_reduce #2 (sum, 4 x float32): ");
    failed.fetch_add(1);
  }, options);

  const json record = read_record(dir + "/flight_rank0.json");
  EXPECT_EQ(record["reason"], "the failure of group " + name);
  std::string failure;
  for (int rank : {0, 1}) failure += record["groups"][group_index(record, name, rank)]["failure"].get<std::string>();
  EXPECT_TRUE(contains(failure, "all_reduce #2 (sum, 4 x float32): timed out after 0.3 s waiting for rank 2 ")) << failure;
  const std::vector<json> missing = entries_of(record, group_index(record, name, 2));
  ASSERT_EQ(missing.size(), 1u);  // a member with nothing since #1
  EXPECT_EQ(missing[0]["state"], "completed");

  const std::string out = run_tool(dir);
  EXPECT_TRUE(contains(out, "1 flight record (rank 0), written on the failure of group " + name + " (rank 0)\n"));
  EXPECT_TRUE(contains(out, "group " + name + " (threads, 3 ranks): ranks 0, 1 wait in all_reduce #2 (sum, 4 x float32); "));
  EXPECT_TRUE(contains(out, "; rank 2 never entered it: its last is all_reduce #1, completed\n"));
}

TEST(FlightRecorder, ASignalWritesTheRecord) {
  const std::string dir = records_go_to("signal");
  std::string name;
  run_ranks(2, [&](ProcessGroup& pg) {
    if (pg.rank() == 0) name = pg.name();
    pg.barrier()->wait();
  });
  dump_flight_record_on_signal();
  dump_flight_record_on_signal();  // again: nothing more
  std::raise(SIGUSR2);
  // The watcher thread writes it; generous, so that no test depends on timing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!exists(dir + "/flight_rank0.json") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const json record = read_record(dir + "/flight_rank0.json");
  EXPECT_EQ(record["reason"], "signal SIGUSR2");
  ASSERT_GE(group_index(record, name, 1), 0);
  EXPECT_EQ(entries_of(record, group_index(record, name, 1)).back()["op"], "barrier");

  const std::string out = run_tool(dir);
  EXPECT_TRUE(contains(out, "group " + name + " (threads, 2 ranks): no collective pending; ranks 0, 1: last barrier #1\n"));
}

TEST(FlightRecorder, AWriteOnRequestNamesAMissingFolder) {
  EXPECT_THROW_MSG(FlightRecorder::get().dump("request", "/no/such/folder/flight_rank0.json"),
                   "/no/such/folder/flight_rank0.json");
  const std::string dir = records_go_to("request");
  EXPECT_EQ(FlightRecorder::get().dump("request"), dir + "/flight_rank0.json");
  EXPECT_EQ(read_record(dir + "/flight_rank0.json")["reason"], "request");
}

}  // namespace
}  // namespace loom::parallel::testing
