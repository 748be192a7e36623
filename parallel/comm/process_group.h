// ProcessGroup: the ranks of a parallel job and the asynchronous collectives
// among them (PyTorch's torch.distributed process group).
//
// Every call checks its arguments on the calling thread (a loom::Error names
// the problem), queues the operation and returns a Work at once; the group's
// own communication thread starts the operations in the order they were
// issued and finishes collectives in that order; no operation waits for an
// earlier send's receiver (work.h).
//
//   auto pg = parallel::init(argc, argv);        // MPI under mpirun, else one rank
//   Tensor grad = ...;
//   parallel::WorkPtr work = pg->all_reduce(grad, parallel::ReduceOp::Avg);
//   ... compute while the gradient travels ...
//   work->wait();                                // grad now holds the mean over ranks
//
// Rules, as in MPI and PyTorch:
//  - every rank issues the same collectives in the same order, with the same
//    dtype, sizes, root and reduce op; a rank that does not fails them all
//    with a message saying which ranks disagree (each collective first shares
//    a 56-byte descriptor per rank; see docs/comm.md for its cost);
//  - tensors must be contiguous; the backend says which devices it takes
//    (threads and MPI: CPU). Do not touch a tensor while an operation on it is
//    in flight; wait() first. Tensors are kept alive until the op finishes;
//  - a send never waits for its receive to start (so rank pairs may both send
//    first, then receive); everything else behaves as if each call blocked;
//  - an operation that does not finish within the timeout fails with an error
//    naming the rank, the operation and its number, and the group becomes
//    unusable: later operations fail at once instead of hanging, and the
//    process's flight record of its last operations is written, to find the
//    rank that never came (flight_recorder.h).
// Issue operations on one group from one thread at a time (the order of
// concurrent calls from several threads is whichever takes the lock first).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "parallel/comm/flight_recorder.h"
#include "parallel/comm/op.h"
#include "parallel/comm/reduce_op.h"
#include "parallel/comm/work.h"
#include "tensor/tensor.h"

namespace loom::parallel {

// The timeout a group gets unless its options say otherwise: the environment
// variable LOOM_COMM_TIMEOUT_SECONDS (seconds from 0.001 to 2592000, 30
// days; fractions allowed), else 300 s. Throws loom::Error on a malformed or
// out-of-range value.
std::chrono::milliseconds default_timeout();

struct ProcessGroupOptions {
  // How long one operation may run on the communication thread (waiting for
  // its peers included) before it fails. Queued time does not count.
  std::chrono::milliseconds timeout = default_timeout();
  // Whether collectives first check that the ranks agree (descriptor
  // exchange). The MPI backend can skip the exchange for all_reduce,
  // broadcast and barrier when false, saving one small collective each;
  // all_gather and reduce_scatter always exchange sizes (they need them), and
  // the threads backend always checks (its exchange is free).
  bool check_consistency = true;
};

// Communication so far, counted per group when an operation succeeds.
struct CommStats {
  int64_t ops = 0;        // operations completed (barriers included)
  int64_t bytes = 0;      // Op::payload_bytes(): the tensors' sizes
  int64_t bus_bytes = 0;  // Op::bus_bytes(): what each rank moved with an optimal algorithm
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // This rank's index among the ranks on its machine (to pick a GPU).
  virtual int local_rank() const { return rank_; }
  virtual std::string backend() const = 0;  // "threads", "mpi"
  const ProcessGroupOptions& options() const { return options_; }
  // The group's name, the same on every member: "world" for the group a
  // launcher or ThreadGroup::create made (a process's later threads jobs:
  // "world-1", "world-2", ...), "<parent>/split<k>.color<c>" for split()'s,
  // "<inner>+nccl" or "<inner>+host-staging" for a group over another.
  // Flight records (flight_recorder.h) name groups by it.
  const std::string& name() const { return name_; }

  // In place: every rank's `tensor` becomes the reduction of all ranks' tensors.
  WorkPtr all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // Every rank's `tensor` becomes rank `root`'s.
  WorkPtr broadcast(const Tensor& tensor, int root);
  // outputs[i] receives rank i's input; ranks may contribute different sizes
  // (outputs[i] has as many elements as rank i's input, any shape).
  WorkPtr all_gather(const std::vector<Tensor>& outputs, const Tensor& input);
  // `output` receives all ranks' inputs concatenated in rank order (PyTorch's
  // all_gather_into_tensor); its size is the sum of the inputs' sizes. In
  // place: the input may be this rank's own piece of the output (a view of
  // it at the sum of the lower ranks' sizes), as NCCL allows.
  WorkPtr all_gather(const Tensor& output, const Tensor& input);
  // The elementwise reduction of all ranks' inputs is split in rank order:
  // rank i receives the next output_i.numel() elements (PyTorch's
  // reduce_scatter_tensor, with uneven pieces allowed). In place: the output
  // may be this rank's own piece of the input. Sharded training uses both in
  // place, so that a rank's piece needs no memory of its own.
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::Sum);
  // Point to point: rank dst's matching recv(tensor, src = this rank, tag)
  // receives `tensor`. Messages between a pair with one tag arrive in order.
  WorkPtr send(const Tensor& tensor, int dst, int tag = 0);
  WorkPtr recv(const Tensor& tensor, int src, int tag = 0);
  // Completes once every rank has reached it.
  WorkPtr barrier();

  CommStats stats() const;

  // Subgroups (MPI_Comm_split; PyTorch's new_group). Every rank of this
  // group calls it, as a collective: the ranks that pass the same `color`
  // form a new group, ranked by (key, their rank here); a negative color
  // joins none and gets nullptr. The new group has this group's options and
  // backend, and is independent of it (its own numbering and thread).
  std::shared_ptr<ProcessGroup> split(int color, int key = 0);
  // The group of `ranks` (ranks of this group, in their new order); every
  // rank of this group calls it, and those not listed get nullptr.
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // Tags run from 0 to kMaxTag (the least upper bound MPI guarantees).
  static constexpr int kMaxTag = 32767;

 protected:
  ProcessGroup(int rank, int size, ProcessGroupOptions options);

  // Which tensors the backend can move; the checks name the backend when not.
  virtual bool supports(Device device) const = 0;
  // Takes a checked, numbered operation. The backend runs its operations in
  // the order they arrive and calls finish() on each, in the same order.
  virtual void enqueue(OpPtr op) = 0;
  // Completes op.work: on success counts the op in stats() and copies an
  // all_gather's result into its output list; error is the failure, if any.
  void finish(Op& op, std::exception_ptr error);
  // Backends whose operations only hand the work on record no trace span of
  // their own: host staging (its inner group records the transfer) and NCCL
  // (which times its spans on the GPU, nccl_lanes.cc).
  void record_no_spans() { records_spans_ = false; }
  // Before the group's first operation: its name (name()).
  void set_name(std::string name) { name_ = std::move(name); }
  // A group over `inner` (NCCL over its bootstrap, host staging): named
  // after it, "<inner's name><suffix>", on the same trace lane.
  void derive_from(const ProcessGroup& inner, const char* suffix) {
    name_ = inner.name_ + suffix;
    job_rank_ = inner.job_rank_;
  }
  // Tells the flight recorder the group's name and ranks, so that a record
  // lists it even before its first operation (a rank that never issued one
  // is named as such); again after a rename. Backends call it once the group
  // is named; issue() does if they did not.
  void record_group();
  // The backend has started `op` on its communication thread: the flight
  // record tells an operation that waits for its peers from one queued
  // behind another.
  void mark_started(const Op& op);
  // The group became unusable (an operation timed out; MPI or NCCL failed):
  // this process's flight record is written now, before the error reaches
  // the caller, who may end the process. Never throws; says where on stderr.
  void group_failed(const std::string& why);
  // Another rank of this process found it unusable (the threads backend)
  // and wrote the record: this rank's part of it says so too.
  void note_group_failed(const std::string& why) { flight_.group_failed(flight_group_, why); }
  // The backend's part of split(), called on every rank: this rank's group
  // of `members` (ranks of this group, in new-rank order; this rank is
  // members[new_rank]), or nullptr for a negative color (then `members` is
  // empty). `id` is the same on every member and different for every
  // subgroup this group makes. All earlier operations have finished.
  virtual std::shared_ptr<ProcessGroup> make_subgroup(int color, const std::vector<int>& members, int new_rank,
                                                      int64_t id) = 0;

 private:
  WorkPtr issue(OpPtr op);
  WorkPtr point_to_point(OpKind kind, const Tensor& tensor, int peer, int tag);  // send, recv
  void check_tensor(const char* what, const Tensor& t, const Tensor& like = Tensor()) const;
  void record_span(const Op& op) const;

  const int rank_;
  const int size_;
  const ProcessGroupOptions options_;
  // This process's rank in the group split() began from: it names the trace
  // lane ("rank<r>/comm") that every group of the process records on.
  int job_rank_;
  bool records_spans_ = true;
  std::string name_ = "world";
  FlightRecorder& flight_;
  std::atomic<int> flight_group_{-1};  // the group's index in flight_, once it issued an operation
  std::mutex issue_mutex_;  // numbers and queues each operation atomically
  int64_t collectives_issued_ = 0;
  int64_t p2p_issued_ = 0;
  int64_t splits_ = 0;  // subgroups asked for so far (the same count on every rank)
  mutable std::mutex stats_mutex_;
  CommStats stats_;
};

}  // namespace loom::parallel
