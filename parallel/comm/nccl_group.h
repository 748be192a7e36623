// NcclGroup: CUDA tensors between ranks over NCCL, one GPU per rank — what
// the "nccl" backend of torch.distributed is to PyTorch.
//
//   auto world = parallel::init(argc, argv);          // MPI under mpirun
//   auto group = parallel::NcclGroup::create(world, Device::cuda(parallel::local_rank()));
//   group->all_reduce(grad_on_gpu, parallel::ReduceOp::Avg)->wait();  // the host does not wait
//
// Programs usually call parallel::for_device (for_device.h), which picks this
// group, host staging, or the plain group from where the ranks' tensors live.
//
// How it works (docs/comm.md has the details):
// - Collectives run on one communicator and one stream, in issue order. Each
//   waits for an event recorded on the caller's current stream when it was
//   issued, and Work::wait() makes the waiting thread's current stream wait
//   for it: wait() never blocks the host. The caching allocator is told that
//   the communication stream uses the tensors (record_stream).
// - Point to point: a two-rank communicator and a stream per direction
//   between a pair, made on first use, and a handshake over the bootstrap
//   group that matches tags and checks sizes (rendezvous.h). So any tag order
//   works, and two ranks may both send before they receive: no deadlock.
// - Before each collective the ranks compare descriptors over the bootstrap
//   group, as the MPI backend does (ProcessGroupOptions::check_consistency);
//   always for all_gather and reduce_scatter, whose sizes may differ per rank.
// - CPU tensors and barriers pass through to the bootstrap group, in order
//   with the collectives.
// - Failures: an operation that has not finished within the group's timeout
//   aborts the communicators (ncclCommAbort, which also ends kernels stuck
//   waiting for a peer); wait() on it, and every later operation, throws the
//   error with the rank, the operation and its number. Asynchronous NCCL
//   errors are reported the same way. Never a hang.
//
// The bootstrap group belongs to the NCCL group after create(): use it only
// through the NCCL group. Its tag 32767 carries the handshakes, so CPU sends
// and receives through the NCCL group may use tags 0 to 32766.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

class NcclGroup : public ProcessGroup {
 public:
  // Every rank of `bootstrap` calls it (a collective over it): rank 0 makes
  // NCCL's unique id and broadcasts it, and each rank joins on `device`, its
  // own GPU (NCCL refuses two ranks on one GPU). Joining completes in the
  // background: a rank that never joins makes the first operation time out.
  // In builds without CUDA it throws.
  static std::shared_ptr<ProcessGroup> create(std::shared_ptr<ProcessGroup> bootstrap, Device device);
  ~NcclGroup() override;  // waits for what was issued (each operation ends by its timeout)

  std::string backend() const override { return "nccl"; }
  int local_rank() const override;

  struct State;  // the communication thread's world (nccl_group.cc)

 protected:
  bool supports(Device device) const override { return device.is_cpu() || device == device_; }
  void enqueue(OpPtr op) override;
  // A communicator of its own over the bootstrap group's subgroup.
  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members, int new_rank,
                                              int64_t id) override;

 private:
  NcclGroup(std::shared_ptr<ProcessGroup> bootstrap, Device device, const std::string& id);
  Device device_;
  std::unique_ptr<State> state_;
};

}  // namespace loom::parallel
