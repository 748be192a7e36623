// What happens when a rank misbehaves under a real mpirun: the job always
// ends, with a message that says which rank and which collective. Each test
// runs mpi_failure_helper under `mpirun -np 2` and reads its output.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

struct MpiRun {
  int status = -1;  // mpirun's exit status
  std::string output;
};

std::string runfile(const std::string& path) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/" + path;
}

// Runs `command` with its stderr, and returns its exit status and output.
MpiRun run_command(const std::string& command) {
  MpiRun run;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) run.output.append(buffer.data(), n);
  int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

// A new empty folder for one scenario's flight records.
std::string record_folder(const std::string& scenario) {
  std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + scenario + ".XXXXXX";
  return mkdtemp(dir.data()) ? dir : "";
}

// Runs the helper under mpirun -np `np` with a timeout of `timeout_seconds`;
// flight records go to `records` (a folder of the test's own when empty).
MpiRun mpirun(const std::string& scenario, int timeout_seconds, int np = 2, std::string records = "") {
  if (records.empty()) records = record_folder(scenario);
  // TMPDIR: Open MPI's session sockets need a short path (Bazel's is long).
  MpiRun run = run_command(
      "TMPDIR=/tmp OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LOOM_COMM_TIMEOUT_SECONDS=" +
      std::to_string(timeout_seconds) + " LOOM_FLIGHT_RECORDER_DIR=" + records + " mpirun -np " + std::to_string(np) +
      " --oversubscribe --bind-to none " + runfile("tests/parallel/mpi_failure_helper") + " " + scenario);
  std::printf("---- mpirun %s (status %d) ----\n%s\n", scenario.c_str(), run.status, run.output.c_str());
  return run;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Rank 1 returns from main before the all_reduce, cleanly (MPI_Finalize at
// exit, where it waits for rank 0). Nothing tells rank 0, so its timeout
// fires; it exits nonzero, skipping MPI_Finalize, and mpirun ends the job.
TEST(MpiFailure, RankThatExitsEarly) {
  MpiRun run = mpirun("rank-exits-early", 3);
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(contains(run.output, "rank 0 caught: rank 0: all_reduce #1 (sum, 4 x float32): did not "
                                   "complete within 3 s (waiting for the other ranks to join)"));
  EXPECT_TRUE(contains(run.output, "loom: not calling MPI_Finalize"));
  EXPECT_TRUE(contains(run.output, "exited with non-zero status"));  // mpirun's own report
}

// Rank 1 dies without MPI_Finalize, as a crash would. mpirun notices and
// stops rank 0 itself, long before loom's timeout (60 s here).
TEST(MpiFailure, RankThatCrashes) {
  MpiRun run = mpirun("rank-crashes", 60);
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(contains(run.output, "Exit code:    3")) << "mpirun names the exit code of rank 1";
  EXPECT_FALSE(contains(run.output, "rank 0 finished"));
  EXPECT_FALSE(contains(run.output, "did not complete within"));  // mpirun ended it first
}

// Rank 1 fails with an error and calls abandon_job before returning: it
// exits without MPI_Finalize, so mpirun stops rank 0 at once, as for a crash,
// instead of rank 0 waiting out loom's timeout (60 s here).
TEST(MpiFailure, RankThatGivesUpEndsTheJobAtOnce) {
  MpiRun run = mpirun("rank-gives-up", 60);
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(contains(run.output, "loom: not calling MPI_Finalize, which would wait for the other ranks, because "
                                   "this rank gave up: rank 1 could not go on"));
  EXPECT_FALSE(contains(run.output, "rank 0 finished"));
  EXPECT_FALSE(contains(run.output, "did not complete within"));  // mpirun ended it first
}

// Rank 1 is alive but never calls the collective: rank 0 times out with the
// facts and exits nonzero, and mpirun then kills the stuck rank.
TEST(MpiFailure, RankThatNeverJoins) {
  MpiRun run = mpirun("never-joins", 2);
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(contains(run.output, "rank 0 caught: rank 0: all_reduce #1 (sum, 4 x float32): did not "
                                   "complete within 2 s"));
  EXPECT_TRUE(contains(run.output, "The process group is now unusable"));
  EXPECT_TRUE(contains(run.output, "loom: rank 0's flight record written to "));
}

// Rank 1 of 3 stops issuing after all_reduce #1 (mpi_failure_helper's
// flight-record): ranks 0 and 2 time out in #2 and write their flight
// records, rank 0 sends SIGUSR2 to mpirun, which forwards it, and rank 1
// writes its record on the signal. tools/flight_record.py then names rank 1.
TEST(MpiFailure, FlightRecordNamesTheRankThatNeverEntered) {
  const std::string records = record_folder("flight-record");
  ASSERT_FALSE(records.empty());
  MpiRun run = mpirun("flight-record", 2, 3, records);
  EXPECT_NE(run.status, 0);
  for (int rank : {0, 2}) {
    const std::string r = std::to_string(rank);
    EXPECT_TRUE(contains(run.output, "rank " + r + " caught: rank " + r +
                                         ": all_reduce #2 (sum, 4 x float32): did not complete within 2 s"));
    EXPECT_TRUE(contains(run.output, "loom: rank " + r + "'s flight record written to " + records + "/flight_rank" +
                                         r + ".json"));
  }
  EXPECT_TRUE(contains(run.output, "loom: flight record written to " + records + "/flight_rank1.json (signal SIGUSR2)"));

  MpiRun tool = run_command("python3 " + runfile("tools/flight_record.py") + " " + records);
  std::printf("---- flight_record.py (status %d) ----\n%s\n", tool.status, tool.output.c_str());
  EXPECT_EQ(tool.status, 0);
  EXPECT_TRUE(contains(tool.output, "3 flight records (ranks 0, 1, 2) of job "));
  EXPECT_TRUE(contains(tool.output, "group world (mpi, 3 ranks): ranks 0, 2 wait in all_reduce #2 (sum, 4 x float32); "
                                    "rank 1 never entered it: its last is all_reduce #1, completed\n"));
  EXPECT_TRUE(contains(tool.output, "  rank 0 found it failed: rank 0: all_reduce #2 (sum, 4 x float32): did not "
                                    "complete within 2 s (waiting for the other ranks to join)"));
}

// The same, in a program that does not catch the error: std::terminate
// prints it, the process aborts (so MPI_Finalize cannot hang), and mpirun
// reports the signal and ends the job.
TEST(MpiFailure, UncaughtTimeoutEndsTheJob) {
  MpiRun run = mpirun("never-joins-uncaught", 2);
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(contains(run.output, "terminate called after throwing an instance of 'loom::Error'"));
  EXPECT_TRUE(contains(run.output, "rank 0: all_reduce #1 (sum, 4 x float32): did not complete within 2 s"));
  EXPECT_TRUE(contains(run.output, "exited on signal 6"));
}

// Rank 1 all-reduces 5 elements where rank 0 has 4: both fail with the same
// facts, nothing hangs, and the job goes on and ends cleanly.
TEST(MpiFailure, RankThatSendsTheWrongSize) {
  MpiRun run = mpirun("wrong-size", 60);
  EXPECT_EQ(run.status, 0);
  for (int rank : {0, 1})
    EXPECT_TRUE(contains(run.output, "rank " + std::to_string(rank) + " caught: rank " +
                                         std::to_string(rank) + ": all_reduce #1 (sum, " +
                                         (rank == 0 ? "4" : "5") +
                                         " x float32): the ranks disagree on the number of "
                                         "elements: 4 on rank 0; 5 on rank 1"));
  EXPECT_TRUE(contains(run.output, "rank 0 recovered: 8"));
  EXPECT_TRUE(contains(run.output, "rank 1 recovered: 8"));
}

}  // namespace
