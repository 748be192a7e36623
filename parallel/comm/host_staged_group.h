// HostStagedGroup: CUDA tensors over a process group that moves only host
// memory (MPI, threads). For ranks that share one GPU, where NCCL refuses to
// run ("Duplicate GPU detected"); see docs/comm.md.
//
//   auto group = parallel::HostStagedGroup::wrap(parallel::init(argc, argv));
//   (parallel::for_device picks it when ranks share a GPU: for_device.h)
//   parallel::DistributedDataParallel ddp(model_on_cuda, group);
//
// Each operation's CUDA tensors are copied into pinned host memory, the inner
// group runs the operation on those copies, and the results are copied back:
// all off the caller's thread and stream. At issue, an event marks the
// caller's current stream where the tensors' values are final; a staging
// thread waits for it, copies to the host on its own stream and issues the
// inner operation; when that completes, the copy back goes on the staging
// stream and Work::wait() makes the waiting thread's current stream wait for
// it (the host never waits for the GPU). Operations on CPU tensors pass
// through unchanged, in order with the rest. Sends finish on their own (a
// send has nothing to copy back), so that a receive never waits for an
// earlier send's receiver (docs/comm.md, Semantics); receives and collectives
// finish in issue order. Same rules as any ProcessGroup: all tensors of one
// operation on one device, no touching them until wait().
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "parallel/comm/op_queue.h"
#include "parallel/comm/process_group.h"

namespace loom::parallel {

class HostStagedGroup : public ProcessGroup {
 public:
  static std::shared_ptr<ProcessGroup> wrap(std::shared_ptr<ProcessGroup> inner);
  ~HostStagedGroup() override;

  std::string backend() const override { return inner_->backend() + "+host-staging"; }
  int local_rank() const override { return inner_->local_rank(); }

  struct Staged;  // one operation on its way through (host_staged_group.cc)

 protected:
  bool supports(Device device) const override { return device.is_cpu() || device.is_cuda(); }
  void enqueue(OpPtr op) override;
  std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members, int new_rank,
                                              int64_t id) override;

 private:
  explicit HostStagedGroup(std::shared_ptr<ProcessGroup> inner);
  void issue_loop();  // copies to the host, issues the inner operations in order
  // Waits for the operations of `queue` in order, copies back, completes the Works.
  void complete_loop(FifoQueue<std::shared_ptr<Staged>>& queue);

  std::shared_ptr<ProcessGroup> inner_;
  FifoQueue<std::shared_ptr<Staged>> to_issue_, to_complete_, sends_to_complete_;
  std::thread issuer_, completer_, send_completer_;
};

}  // namespace loom::parallel
