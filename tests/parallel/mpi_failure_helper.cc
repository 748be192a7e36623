// A small MPI program for mpi_failure_test.cc: each scenario makes one rank
// misbehave, and the ranks print what they saw. Run under mpirun -np 2:
//
//   mpi_failure_helper rank-exits-early | rank-crashes | rank-gives-up | never-joins |
//                      never-joins-uncaught | wrong-size
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "parallel/comm/init.h"
#include "tensor/ops.h"

using namespace loom;

int main(int argc, char** argv) {
  auto pg = parallel::init(argc, argv);  // the timeout comes from LOOM_COMM_TIMEOUT_SECONDS
  const std::string scenario = argc > 1 ? argv[1] : "";
  const int rank = pg->rank();
  std::fprintf(stderr, "rank %d started (%s)\n", rank, scenario.c_str());

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
