// Starting a parallel job: the process group of this process.
//
//   int main(int argc, char** argv) {
//     auto pg = loom::parallel::init(argc, argv);  // `mpirun -np 4 ./train`: 4 ranks; `./train`: 1
//     Device dev = cuda_available() ? Device::cuda(pg->local_rank()) : Device::cpu();
//     ...
//   }
//
// Under mpirun (Open MPI sets OMPI_COMM_WORLD_SIZE) or srun (PMIX_RANK or
// PMI_RANK), init() returns the MPI backend's group of all processes, and MPI
// is finalised when the process exits. Started any other way, it returns a
// one-rank group (the threads backend), so the same program runs unchanged.
// Every rank calls init() once. How to launch: docs/comm.md.
//
// Ranks on one machine share its cores: unless OMP_NUM_THREADS is set, each
// rank uses cores / (ranks on the machine) OpenMP threads.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

// argc and argv go to MPI_Init_thread, which may remove MPI's own arguments.
std::shared_ptr<ProcessGroup> init(int& argc, char**& argv, ProcessGroupOptions options = {});
std::shared_ptr<ProcessGroup> init(ProcessGroupOptions options = {});

// For a rank that gives up on the job (an error it will not recover from)
// while other ranks may be waiting for it: it then exits without
// MPI_Finalize, so mpirun stops the whole job at once instead of the others
// waiting out their timeouts. Call it before returning an error from main().
// Without MPI it does nothing.
//
//   } catch (const Error& e) { std::fprintf(stderr, ...); parallel::abandon_job(e.what()); return 1; }
void abandon_job(const std::string& why);

// Whether an MPI launcher started this process (its environment says so).
bool launched_by_mpi();

// This process's index among the job's processes on its machine, from the
// launcher's environment (OMPI_COMM_WORLD_LOCAL_RANK, else SLURM_LOCALID);
// 0 when started without one. Each rank picks its GPU with it.
int local_rank();

}  // namespace loom::parallel
