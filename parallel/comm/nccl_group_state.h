// What the NcclGroup's files share (nccl_group.cc, nccl_ordered.cc,
// nccl_handshakes.cc, nccl_lanes.cc): the group's state and the pieces it
// is made of. Internal: include it only from those files.
//
// Who runs what: nccl_group.cc holds the group's life and its loop;
// nccl_ordered.cc the issue-ordered operations (collectives, barriers, CPU
// tensors); nccl_handshakes.cc the point-to-point handshakes; nccl_lanes.cc
// the lanes that make the NCCL calls and the watchdog over them.
#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/comm/nccl_comm.h"
#include "parallel/comm/nccl_group.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/trace.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"

namespace loom::parallel {
namespace nccl {

using Clock = std::chrono::steady_clock;

// The bootstrap group's tag that carries the handshakes.
constexpr int kHandshakeTag = ProcessGroup::kMaxTag;

ncclDataType_t nccl_type(DType dtype);
ncclRedOp_t nccl_op(ReduceOp op);
bool on_gpu(const Op& op);
// Element i of a contiguous CUDA tensor, as a device address.
char* address(const Tensor& t, int64_t element = 0);
// The same operation on another group (CPU tensors, barriers).
WorkPtr forward(ProcessGroup& group, const Op& op);
std::exception_ptr error_of(const std::string& message);

// What wait() on an operation already handed to the GPU learns later: set
// when the watchdog gives up on it.
struct Outcome {
  std::mutex mutex;
  std::string error;
};

// One operation's NCCL calls, on one lane.
struct Transfer {
  OpPtr op;
  std::function<void(NcclComm&, cudaStream_t)> launch;
  std::shared_ptr<cuda::Event> ready;  // the issuing stream, where the tensors' values are final
  std::shared_ptr<cuda::Event> done = std::make_shared<cuda::Event>();
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
  Clock::time_point deadline;
  const char* stage = "waiting for its communicator";
  std::string name;                  // for the trace
  std::unique_ptr<trace::Span> span;  // tracing: the GPU's time from the launch to the done event
};

// A communicator, its stream, and the transfers queued for it. A call may
// leave the communicator busy (nccl_comm.h): one transfer at a time.
struct Lane {
  std::string name;
  std::unique_ptr<NcclComm> comm;  // a channel's: made on its first transfer
  cuda::Stream stream{0, nullptr};  // its own (Stream::dedicated): made with the group, or a channel's by stream_of()
  std::deque<std::shared_ptr<Transfer>> queue;
  std::shared_ptr<Transfer> calling;  // its NCCL calls made, maybe still in progress
  bool idle() const { return queue.empty() && !calling; }
};

// An operation of the issue-ordered sequence: collective, barrier or CPU.
struct Ordered {
  OpPtr op;
  std::shared_ptr<cuda::Event> ready;
  bool started = false;
  Tensor descriptors;  // gathered from every rank
  WorkPtr exchange;    // the descriptor all_gather on the bootstrap group
  WorkPtr forwarded;   // a CPU operation or barrier run by the bootstrap group
};

}  // namespace nccl

struct NcclGroup::State {
  State(NcclGroup* group, std::shared_ptr<ProcessGroup> bootstrap, Device device, const std::string& id);
  ~State();

  // ---- the caller's side ----
  void issue(OpPtr op);
  cuda::Stream stream_of(const Op& op);

  // ---- the communication thread ----
  void run();
  bool pass();  // one pass of the loop; true if anything happened
  void accept(OpPtr op, std::shared_ptr<cuda::Event> ready, nccl::Clock::time_point issued);
  bool advance_ordered();
  bool advance_handshakes();
  bool advance_lane(nccl::Lane& lane);
  bool watch();
  std::shared_ptr<nccl::Transfer> collective(const nccl::Ordered& o);
  void queue_transfer(nccl::Lane& lane, std::shared_ptr<nccl::Transfer> t);
  void complete(nccl::Lane& lane, const std::shared_ptr<nccl::Transfer>& t);
  void send_handshake(int peer, const rendezvous::Message& message);
  void fail_group(const std::string& why);
  void finish(Op& op, std::exception_ptr error) { group->finish(op, error); }
  std::vector<nccl::Lane*> lanes();
  bool busy() const;

  NcclGroup* group;
  std::shared_ptr<ProcessGroup> bootstrap;
  const int rank, size, device;
  const std::chrono::milliseconds timeout;
  const bool check_consistency;

  nccl::Lane collectives;
  std::vector<nccl::Lane> to, from;  // point-to-point channels, by peer
  std::vector<rendezvous::SendMatcher> sends;
  std::vector<rendezvous::RecvMatcher> recvs;
  std::map<Op*, nccl::Clock::time_point> handshake_deadlines;  // sends and recvs not yet matched
  std::map<Op*, std::shared_ptr<cuda::Event>> p2p_ready;
  std::vector<std::pair<Tensor, WorkPtr>> listening;  // per peer: a posted handshake recv
  std::vector<WorkPtr> handshakes_sent;
  std::deque<nccl::Ordered> ordered;
  std::vector<std::pair<OpPtr, WorkPtr>> forwarded_p2p;  // CPU sends and recvs
  std::vector<std::shared_ptr<nccl::Transfer>> running;  // finished here, still running on the GPU
  std::string failure;

  std::mutex mutex;  // guards the rest
  std::condition_variable wake;
  struct Issued {
    OpPtr op;
    std::shared_ptr<cuda::Event> ready;
    nccl::Clock::time_point at;
  };
  std::deque<Issued> incoming;
  bool closing = false;
  std::thread thread;
};

}  // namespace loom::parallel
