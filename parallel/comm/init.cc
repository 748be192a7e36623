#include "parallel/comm/init.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>
#include <string>

#include "parallel/comm/mpi_group.h"
#include "parallel/comm/thread_group.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace {

const char* env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Ranks sharing a machine share its cores: unless OMP_NUM_THREADS says
// otherwise, each gets cores / ranks-on-this-machine OpenMP threads (at least
// one), instead of every rank starting a thread per core and all of them
// spinning against each other. torchrun does the same (it sets 1).
void share_cores_among_local_ranks() {
  const char* local_size = env("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (env("OMP_NUM_THREADS") || !local_size) return;
  const int ranks = std::max(1, std::atoi(local_size));
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  omp_set_num_threads(std::max(1, cores / ranks));
}

std::shared_ptr<ProcessGroup> start(int* argc, char*** argv, ProcessGroupOptions options) {
  if (launched_by_mpi()) {
    share_cores_among_local_ranks();
    return MpiGroup::world(options, argc, argv);
  }
  return ThreadGroup::create(1, options)[0];
}

}  // namespace

void abandon_job(const std::string& why) {
  if (launched_by_mpi()) MpiGroup::abandon(why);
}

bool launched_by_mpi() {
  // Open MPI's mpirun; PMIx (Open MPI 4+ under srun --mpi=pmix); PMI-1/2 (srun, MPICH's hydra).
  return env("OMPI_COMM_WORLD_SIZE") || env("PMIX_RANK") || env("PMI_RANK");
}

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* value = env(name)) {
      char* end = nullptr;
      long rank = std::strtol(value, &end, 10);
      LOOM_CHECK(*end == '\0' && rank >= 0, "local_rank: ", name, "='", value,
                 "' is not a rank");
      return static_cast<int>(rank);
    }
  }
  return 0;
}

std::shared_ptr<ProcessGroup> init(int& argc, char**& argv, ProcessGroupOptions options) {
  return start(&argc, &argv, options);
}

std::shared_ptr<ProcessGroup> init(ProcessGroupOptions options) {
  return start(nullptr, nullptr, options);
}

}  // namespace loom::parallel
