// A small MPI program for mpi_failure_test.cc: each scenario makes one rank
// misbehave, and the ranks print what they saw. Run under mpirun -np 2
// (flight-record: -np 3):
//
//   mpi_failure_helper rank-exits-early | rank-crashes | rank-gives-up | never-joins |
//                      never-joins-uncaught | wrong-size | flight-record
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/init.h"
#include "tensor/ops.h"

using namespace loom;

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// Rank 1 completes all_reduce #1 with the others, then stops issuing (as a
// rank stuck in computation or a deadlock would). Ranks 0 and 2 time out in
// all_reduce #2 and write their flight records. Rank 0 then does what an
// operator would, `kill -USR2 <mpirun>`: mpirun forwards the signal to every
// rank, and rank 1 writes its record too. Ranks 0 and 2 end the job once all
// three records are there (or after 60 s).
int flight_record(parallel::ProcessGroup& pg) {
  parallel::dump_flight_record_on_signal();
  const int rank = pg.rank();
  Tensor t = ones({4});
  pg.all_reduce(t)->wait();
  if (rank == 1)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // stuck until mpirun kills it
  try {
    pg.all_reduce(t)->wait();
    std::fprintf(stderr, "rank %d finished the all_reduce\n", rank);
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", rank, e.what());
  }
  const char* dir = std::getenv("LOOM_FLIGHT_RECORDER_DIR");
  auto record = [&](int r) { return std::string(dir ? dir : ".") + "/flight_rank" + std::to_string(r) + ".json"; };
  if (rank == 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!exists(record(2)) && std::chrono::steady_clock::now() < deadline)  // rank 2 timed out too
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::fprintf(stderr, "rank 0 signals mpirun (pid %d)\n", static_cast<int>(getppid()));
    kill(getppid(), SIGUSR2);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(exists(record(0)) && exists(record(1)) && exists(record(2))) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  parallel::abandon_job("the all_reduce timed out");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  auto pg = parallel::init(argc, argv);  // the timeout comes from LOOM_COMM_TIMEOUT_SECONDS
  const std::string scenario = argc > 1 ? argv[1] : "";
  const int rank = pg->rank();
  std::fprintf(stderr, "rank %d started (%s)\n", rank, scenario.c_str());
  if (scenario == "flight-record") return flight_record(*pg);

  if (rank == 1) {
    if (scenario == "rank-exits-early") return 0;  // cleanly, before the collective
    if (scenario == "rank-crashes") std::_Exit(3);  // as a crash would: no cleanup
    if (scenario == "rank-gives-up") {  // an error it reports, then leaves the job
      std::fprintf(stderr, "rank 1 gives up\n");
      parallel::abandon_job("rank 1 could not go on");
      return 1;
    }
    if (scenario.rfind("never-joins", 0) == 0)
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // stuck until killed
  }

  Tensor t = ones({scenario == "wrong-size" && rank == 1 ? 5 : 4});
  if (scenario == "never-joins-uncaught") pg->all_reduce(t)->wait();  // as most programs would
  try {
    pg->all_reduce(t)->wait();
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d caught: %s\n", rank, e.what());
    if (scenario != "wrong-size") return 1;
    // A mismatch leaves the group usable: finish cleanly.
    Tensor u = ones({4});
    pg->all_reduce(u)->wait();
    std::fprintf(stderr, "rank %d recovered: %g\n", rank, u.sum().item());
    return 0;
  }
  std::fprintf(stderr, "rank %d finished the all_reduce\n", rank);
  return 0;
}
