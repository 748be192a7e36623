// MpiGroup: the process group of a job that mpirun (Open MPI) or srun started,
// one rank per process, on CPU tensors.
//
//   auto pg = parallel::MpiGroup::world();   // what parallel::init() returns under mpirun
//   pg->all_reduce(grad)->wait();
//
// MPI is initialised (MPI_THREAD_MULTIPLE) on first use and finalised when the
// process exits. Each group works on its own duplicate of MPI_COMM_WORLD and
// has one communication thread. That thread starts the non-blocking MPI calls
// (MPI_Iallreduce, MPI_Ibcast, ...) and polls them with MPI_Test until they
// finish: Debian's Open MPI has no progress thread, so a non-blocking
// collective advances only while some thread is inside MPI, and this thread is
// the one. The caller's thread returns at once and keeps computing.
//
// Each collective is two MPI collectives: a 56-byte-per-rank MPI_Iallgather of
// descriptors (see descriptor.h), then the payload (all_reduce and broadcast
// in 4 MB pieces, which Open MPI moves much faster than one large call). Collectives run one at a
// time; sends and receives start as soon as they are issued, even while a
// collective is running, and a send carries a 16-byte header (dtype, count) in
// the same message so that the receiver can name a mismatch.
//
// When an operation times out the group is unusable (MPI cannot cancel a
// collective), and at exit MPI_Finalize is skipped — it would wait for the
// peer that never came. mpirun then reports the process as having exited
// without finalising and stops the job.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

class MpiGroup : public ProcessGroup {
 public:
  // All processes of the job, on a duplicate of MPI_COMM_WORLD. Collective:
  // every process must call it. Initialises MPI on first use, passing it
  // argc and argv (which MPI may edit), if given.
  static std::shared_ptr<ProcessGroup> world(ProcessGroupOptions options = {}, int* argc = nullptr,
                                             char*** argv = nullptr);
  ~MpiGroup() override;
  // This process gives up on the job: at exit it skips MPI_Finalize (which
  // would wait for ranks that may be waiting for it), so mpirun sees it fail
  // and stops the others. Does nothing if MPI was never initialised.
  static void abandon(const std::string& why);

  std::string backend() const override { return "mpi"; }
  int local_rank() const override { return local_rank_; }

  struct State;  // MPI handles and the communication thread (mpi_group.cc)

 protected:
  bool supports(Device device) const override { return device.is_cpu(); }
  void enqueue(OpPtr op) override;
  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members, int new_rank,
                                              int64_t id) override;

 private:
  MpiGroup(int rank, int size, int local_rank, ProcessGroupOptions options);
  struct Communicator;  // an MPI_Comm, kept out of this header (mpi_group.cc)
  static std::shared_ptr<ProcessGroup> on(const Communicator& comm, ProcessGroupOptions options);
  void run();  // the communication thread

  const int local_rank_;
  std::unique_ptr<State> state_;
};

}  // namespace loom::parallel
