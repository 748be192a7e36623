// NcclGroup (nccl_group.h): one communication thread per group runs a loop
// that never waits inside NCCL or for a peer. Each pass it
//  - takes newly issued operations;
//  - advances the ordered ones (collectives, barriers, CPU operations) one at
//    a time: descriptor exchange over the bootstrap group, then a transfer on
//    the collectives lane (or, for CPU tensors and barriers, the same
//    operation on the bootstrap group);
//  - advances the point-to-point handshakes (rendezvous.h) and queues the
//    matched transfers on their channel's lane;
//  - on each lane (a communicator, a stream, a queue of transfers) starts the
//    next transfer once the communicator is free, and finishes an operation
//    once its NCCL calls are enqueued;
//  - watches the transfers on the GPU and the deadlines.
#include "parallel/comm/nccl_group.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "parallel/comm/descriptor.h"
#include "parallel/comm/nccl_comm.h"
#include "parallel/comm/rendezvous.h"
#include "parallel/trace.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"

namespace loom::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// The bootstrap group's tag that carries the handshakes.
constexpr int kHandshakeTag = ProcessGroup::kMaxTag;

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case kBool:
    case kUInt8: return ncclUint8;
    case kInt64: return ncclInt64;
    case kFloat32: return ncclFloat32;
    case kFloat64: return ncclFloat64;
    case kBFloat16: return ncclBfloat16;
    case kFloat16: return ncclFloat16;
  }
  LOOM_FAIL("nccl backend: unsupported dtype ", dtype);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  LOOM_FAIL("nccl backend: unsupported reduce op");
}

bool on_gpu(const Op& op) {
  return (op.input.defined() && op.input.device().is_cuda()) || (op.output.defined() && op.output.device().is_cuda());
}

// Element i of a contiguous CUDA tensor, as a device address.
char* address(const Tensor& t, int64_t element = 0) {
  return static_cast<char*>(t.raw_data()) + element * static_cast<int64_t>(t.element_size());
}

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
  cuda::Stream stream{0, nullptr};  // set by the group, before its thread starts
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

// The same operation on another group (CPU tensors, barriers).
WorkPtr forward(ProcessGroup& group, const Op& op) {
  switch (op.kind) {
    case OpKind::AllReduce: return group.all_reduce(op.output, op.reduce);
    case OpKind::Broadcast: return group.broadcast(op.output, op.peer);
    case OpKind::AllGather: return group.all_gather(op.output, op.input);
    case OpKind::ReduceScatter: return group.reduce_scatter(op.output, op.input, op.reduce);
    case OpKind::Barrier: return group.barrier();
    case OpKind::Send: return group.send(op.input, op.peer, op.tag);
    case OpKind::Recv: return group.recv(op.output, op.peer, op.tag);
  }
  LOOM_FAIL("nccl backend: unknown operation");
}

std::exception_ptr error_of(const std::string& message) { return std::make_exception_ptr(Error(message)); }

}  // namespace

struct NcclGroup::State {
  State(NcclGroup* group, std::shared_ptr<ProcessGroup> bootstrap, Device device, const std::string& id);
  ~State();

  // ---- the caller's side ----
  void issue(OpPtr op);

  // ---- the communication thread ----
  void run();
  bool pass();  // one pass of the loop; true if anything happened
  void accept(OpPtr op, std::shared_ptr<cuda::Event> ready, Clock::time_point issued);
  bool advance_ordered();
  bool advance_handshakes();
  bool advance_lane(Lane& lane);
  bool watch();
  std::shared_ptr<Transfer> collective(const Ordered& o);
  void queue_transfer(Lane& lane, std::shared_ptr<Transfer> t);
  void complete(Lane& lane, const std::shared_ptr<Transfer>& t);
  void send_handshake(int peer, const rendezvous::Message& message);
  void fail_group(const std::string& why);
  void finish(Op& op, std::exception_ptr error) { group->finish(op, error); }
  std::vector<Lane*> lanes();
  bool busy() const;

  NcclGroup* group;
  std::shared_ptr<ProcessGroup> bootstrap;
  const int rank, size, device;
  const std::chrono::milliseconds timeout;
  const bool check_consistency;

  Lane collectives;
  std::vector<Lane> to, from;  // point-to-point channels, by peer
  std::vector<rendezvous::SendMatcher> sends;
  std::vector<rendezvous::RecvMatcher> recvs;
  std::map<Op*, Clock::time_point> handshake_deadlines;  // sends and recvs not yet matched
  std::map<Op*, std::shared_ptr<cuda::Event>> p2p_ready;
  std::vector<std::pair<Tensor, WorkPtr>> listening;  // per peer: a posted handshake recv
  std::vector<WorkPtr> handshakes_sent;
  std::deque<Ordered> ordered;
  std::vector<std::pair<OpPtr, WorkPtr>> forwarded_p2p;  // CPU sends and recvs
  std::vector<std::shared_ptr<Transfer>> running;  // finished here, still running on the GPU
  std::string failure;

  std::mutex mutex;  // guards the rest
  std::condition_variable wake;
  struct Issued {
    OpPtr op;
    std::shared_ptr<cuda::Event> ready;
    Clock::time_point at;
  };
  std::deque<Issued> incoming;
  bool closing = false;
  std::thread thread;
};

NcclGroup::State::State(NcclGroup* g, std::shared_ptr<ProcessGroup> b, Device d, const std::string& id)
    : group(g),
      bootstrap(std::move(b)),
      rank(bootstrap->rank()),
      size(bootstrap->size()),
      device(d.index()),
      timeout(bootstrap->options().timeout),
      check_consistency(bootstrap->options().check_consistency),
      to(size),
      from(size),
      sends(size),
      recvs(size),
      listening(size) {
  CUDA_CHECK(cudaSetDevice(device));
  collectives.name = "collectives";
  collectives.stream = cuda::Stream::from_pool(device);
  collectives.comm = std::make_unique<NcclComm>(id, size, rank);
  for (int p = 0; p < size; ++p) {
    to[p].name = detail::concat("sends to rank ", p);
    from[p].name = detail::concat("receives from rank ", p);
    to[p].stream = cuda::Stream::from_pool(device);
    from[p].stream = cuda::Stream::from_pool(device);
  }
  thread = std::thread([this] { run(); });
}

NcclGroup::State::~State() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    closing = true;
  }
  wake.notify_all();
  thread.join();
}

// On the caller's thread: mark where the tensors' values are final, and tell
// the allocator which stream will read or write them.
void NcclGroup::State::issue(OpPtr op) {
  std::shared_ptr<cuda::Event> ready;
  if (on_gpu(*op)) {
    ready = std::make_shared<cuda::Event>();
    ready->record(cuda::current_stream(device));
    const cuda::Stream& stream = op->kind == OpKind::Send   ? to[op->peer].stream
                                 : op->kind == OpKind::Recv ? from[op->peer].stream
                                                            : collectives.stream;
    for (const Tensor& t : {op->input, op->output})
      if (t.defined()) cuda::record_stream(t, stream);
    for (const Tensor& t : op->outputs) cuda::record_stream(t, stream);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    incoming.push_back({std::move(op), std::move(ready), Clock::now()});
  }
  wake.notify_all();
}

void NcclGroup::State::run() {
  cudaSetDevice(device);
  for (;;) {
    std::deque<Issued> taken;
    {
      std::unique_lock<std::mutex> lock(mutex);
      // Idle: sleep until something is issued. Busy: poll, napping briefly.
      if (!busy()) wake.wait(lock, [&] { return closing || !incoming.empty(); });
      taken.swap(incoming);
      if (closing && taken.empty() && !busy()) break;
    }
    for (Issued& i : taken) accept(std::move(i.op), std::move(i.ready), i.at);
    bool progress = false;
    try {
      progress = pass();
    } catch (const std::exception& e) {
      fail_group(e.what());
    }
    if (!progress && taken.empty()) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

bool NcclGroup::State::busy() const {
  if (!ordered.empty() || !forwarded_p2p.empty() || !running.empty() || !handshake_deadlines.empty()) return true;
  for (const auto& l : listening)
    if (l.second) return true;
  if (!collectives.idle()) return true;
  for (int p = 0; p < size; ++p)
    if (!to[p].idle() || !from[p].idle()) return true;
  return false;
}

std::vector<Lane*> NcclGroup::State::lanes() {
  std::vector<Lane*> out{&collectives};
  for (int p = 0; p < size; ++p) {
    out.push_back(&to[p]);
    out.push_back(&from[p]);
  }
  return out;
}

bool NcclGroup::State::pass() {
  bool progress = advance_ordered();
  progress |= advance_handshakes();
  for (Lane* lane : lanes()) progress |= advance_lane(*lane);
  progress |= watch();
  return progress;
}

void NcclGroup::State::accept(OpPtr op, std::shared_ptr<cuda::Event> ready, Clock::time_point issued) {
  if (!failure.empty()) {
    finish(*op, error_of(detail::concat(op->where(), ": not run, the process group failed earlier: ", failure)));
    return;
  }
  for (const Tensor& t : {op->input, op->output})
    if (t.defined() && t.device() != (on_gpu(*op) ? Device::cuda(device) : Device::cpu())) {
      finish(*op, error_of(detail::concat(op->where(), ": the nccl backend needs all of an operation's tensors on one "
                                          "device; got ", op->input.device(), " and ", op->output.device())));
      return;
    }
  if (!is_p2p(op->kind)) {
    Ordered o;
    o.op = std::move(op);
    o.ready = std::move(ready);
    ordered.push_back(std::move(o));
    return;
  }
  if (!on_gpu(*op)) {  // CPU tensors: the bootstrap group moves them
    if (op->tag == kHandshakeTag) {
      finish(*op, error_of(detail::concat(op->where(), ": tag ", kHandshakeTag,
                                          " carries the nccl backend's handshakes; use tags up to ",
                                          kHandshakeTag - 1, " for CPU tensors")));
      return;
    }
    WorkPtr work = forward(*bootstrap, *op);
    forwarded_p2p.emplace_back(std::move(op), std::move(work));
    return;
  }
  if (op->peer == rank) {
    finish(*op, error_of(detail::concat(op->where(), ": the nccl backend does not send a CUDA tensor to its own "
                                        "rank; copy it instead")));
    return;
  }
  handshake_deadlines[op.get()] = issued + timeout;
  p2p_ready[op.get()] = std::move(ready);
  if (op->kind == OpKind::Send) {
    sends[op->peer].add_send(std::move(op));
  } else {
    rendezvous::Message m;
    m.request = recvs[op->peer].add_recv(op);
    send_handshake(op->peer, m);
  }
}

// The issue-ordered operations, one at a time: a later one starts only when
// the earlier ones are finished, so they finish in issue order.
bool NcclGroup::State::advance_ordered() {
  bool progress = false;
  while (!ordered.empty()) {
    Ordered& o = ordered.front();
    if (!o.started) {
      // CPU operations and barriers wait for the collectives lane to empty,
      // so that nothing issued later finishes before what came first.
      if (!on_gpu(*o.op)) {
        if (!collectives.idle()) return progress;
        o.forwarded = forward(*bootstrap, *o.op);
      } else if (check_consistency || o.op->kind == OpKind::AllGather || o.op->kind == OpKind::ReduceScatter) {
        const Descriptor mine = make_descriptor(*o.op);
        Tensor own = from_vector<int64_t>(std::vector<int64_t>(reinterpret_cast<const int64_t*>(&mine),
                                                               reinterpret_cast<const int64_t*>(&mine) + kDescriptorWords),
                                          {kDescriptorWords}, {.dtype = kInt64});
        o.descriptors = empty({kDescriptorWords * size}, {.dtype = kInt64});
        o.exchange = bootstrap->all_gather(o.descriptors, own);
      }
      o.started = true;
      progress = true;
    }
    if (o.forwarded) {
      if (!o.forwarded->is_completed()) return progress;
      std::exception_ptr error;
      try {
        o.forwarded->wait();
      } catch (...) {
        error = std::current_exception();
      }
      finish(*o.op, error);
      ordered.pop_front();
      progress = true;
      continue;
    }
    if (o.exchange && !o.exchange->is_completed()) return progress;
    if (o.exchange) {
      try {
        o.exchange->wait();
      } catch (const Error& e) {  // the bootstrap group broke (a rank that never came): the group fails
        throw Error(detail::concat(o.op->where(), ": the ranks did not meet to compare it (", e.what(), ")"));
      }
    }
    try {
      std::shared_ptr<Transfer> t = collective(o);
      queue_transfer(collectives, std::move(t));
    } catch (const Error&) {  // the ranks disagree: this operation fails, the group goes on
      finish(*o.op, std::current_exception());
    }
    ordered.pop_front();
    progress = true;
  }
  return progress;
}

// The NCCL calls of a collective (its descriptors, if exchanged, are in).
std::shared_ptr<Transfer> NcclGroup::State::collective(const Ordered& o) {
  const Op& op = *o.op;
  std::vector<int64_t> counts;  // all_gather, reduce_scatter: per rank
  if (o.exchange) {
    std::vector<Descriptor> all(size);
    std::memcpy(all.data(), o.descriptors.raw_data(), sizeof(Descriptor) * size);
    check_descriptors(op, all);
    if (op.kind == OpKind::AllGather || op.kind == OpKind::ReduceScatter) counts = split_counts(all, op.kind);
  }
  auto t = std::make_shared<Transfer>();
  t->op = o.op;
  t->ready = o.ready;
  const Tensor in = op.input, out = op.output;
  const ncclDataType_t type = nccl_type(op.dtype());
  const std::string what = op.where();
  const ncclRedOp_t reduce = nccl_op(op.reduce);
  const int me = rank;
  switch (op.kind) {
    case OpKind::AllReduce:
      t->launch = [=](NcclComm& c, cudaStream_t s) {
        if (out.numel() > 0) c.call(ncclAllReduce(address(out), address(out), out.numel(), type, reduce, c.get(), s), what);
      };
      break;
    case OpKind::Broadcast: {
      const int root = op.peer;
      t->launch = [=](NcclComm& c, cudaStream_t s) {
        if (out.numel() > 0) c.call(ncclBroadcast(address(out), address(out), out.numel(), type, root, c.get(), s), what);
      };
      break;
    }
    case OpKind::AllGather:
    case OpKind::ReduceScatter: {
      const bool gather = op.kind == OpKind::AllGather;
      const bool even = std::all_of(counts.begin(), counts.end(), [&](int64_t n) { return n == counts[0]; });
      t->launch = [=](NcclComm& c, cudaStream_t s) {
        if (even) {  // NCCL's own collective
          if (counts[0] == 0) return;
          if (gather)
            c.call(ncclAllGather(address(in), address(out), counts[0], type, c.get(), s), what);
          else
            c.call(ncclReduceScatter(address(in), address(out), counts[0], type, reduce, c.get(), s), what);
          return;
        }
        // Uneven pieces: one broadcast (gather) or reduce (scatter) per rank, fused in a group.
        c.call(ncclGroupStart(), what);
        int64_t offset = 0;
        for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
          if (counts[r] > 0) {
            if (gather)
              c.call(ncclBroadcast(r == me ? address(in) : address(out, offset), address(out, offset), counts[r], type,
                                   r, c.get(), s),
                     what);
            else  // the receive buffer matters on the root only
              c.call(ncclReduce(address(in, offset), address(out), counts[r], type, reduce, r, c.get(), s), what);
          }
          offset += counts[r];
        }
        c.call(ncclGroupEnd(), what);
      };
      break;
    }
    default:
      LOOM_INTERNAL_ASSERT(false, "not a collective: ", what);
  }
  return t;
}

void NcclGroup::State::queue_transfer(Lane& lane, std::shared_ptr<Transfer> t) {
  t->deadline = Clock::now() + timeout;
  lane.queue.push_back(std::move(t));
}

void NcclGroup::State::send_handshake(int peer, const rendezvous::Message& message) {
  const std::vector<uint8_t> bytes = rendezvous::encode(message);
  Tensor t = from_vector<uint8_t>(bytes, {static_cast<int64_t>(bytes.size())}, {.dtype = kUInt8});
  handshakes_sent.push_back(bootstrap->send(t, peer, kHandshakeTag));
}

bool NcclGroup::State::advance_handshakes() {
  bool progress = false;
  const Clock::time_point now = Clock::now();
  // Matched sends: answer the receiver, and queue the transfer on the channel.
  for (int p = 0; p < size; ++p) {
    for (rendezvous::SendMatcher::Match& m : sends[p].take_matches()) {
      progress = true;
      Op& op = *m.send;
      rendezvous::Message reply;
      reply.kind = rendezvous::Message::kReply;
      reply.reply = {m.request.id, m.ok, static_cast<int64_t>(op.input.dtype()), op.input.numel()};
      auto ready = p2p_ready[&op];
      handshake_deadlines.erase(&op);
      p2p_ready.erase(&op);
      if (!m.ok) {
        send_handshake(p, reply);
        finish(op, error_of(rendezvous::send_mismatch(op, m.request)));
        continue;
      }
      Lane& lane = to[p];
      if (!lane.comm) {  // the channel's first message: its sender makes the communicator
        reply.has_channel_id = true;
        reply.channel_id = NcclComm::new_id();
        lane.comm = std::make_unique<NcclComm>(reply.channel_id, 2, 0);
      }
      send_handshake(p, reply);
      auto t = std::make_shared<Transfer>();
      t->op = m.send;
      t->ready = std::move(ready);
      const Tensor in = op.input;
      const std::string what = op.where();
      t->launch = [in, what](NcclComm& c, cudaStream_t s) {
        if (in.numel() > 0) c.call(ncclSend(address(in), in.numel(), nccl_type(in.dtype()), 1, c.get(), s), what);
      };
      queue_transfer(lane, std::move(t));
    }
  }
  // Listen to a peer while a send waits for its request or a recv for its reply.
  for (int p = 0; p < size; ++p) {
    auto& [buffer, work] = listening[p];
    if (work && work->is_completed()) {
      work->wait();  // a broken bootstrap group fails this one (run())
      const rendezvous::Message m = rendezvous::decode(buffer.data_ptr<uint8_t>(), buffer.numel(), p);
      work.reset();
      progress = true;
      if (m.kind == rendezvous::Message::kRequest) {
        sends[p].add_request(m.request);
      } else {
        OpPtr op = recvs[p].take(m.reply, p);
        auto ready = p2p_ready[op.get()];
        handshake_deadlines.erase(op.get());
        p2p_ready.erase(op.get());
        if (!m.reply.ok) {
          finish(*op, error_of(rendezvous::recv_mismatch(*op, m.reply)));
        } else {
          Lane& lane = from[p];
          if (m.has_channel_id) {
            LOOM_CHECK(!lane.comm, "nccl backend: rank ", p, " opened its channel to rank ", rank, " twice");
            lane.comm = std::make_unique<NcclComm>(m.channel_id, 2, 1);
          }
          LOOM_CHECK(lane.comm, "nccl backend: rank ", p, " sent before opening its channel");
          auto t = std::make_shared<Transfer>();
          t->op = op;
          t->ready = std::move(ready);
          const Tensor out = op->output;
          const std::string what = op->where();
          t->launch = [out, what](NcclComm& c, cudaStream_t s) {
            if (out.numel() > 0)
              c.call(ncclRecv(address(out), out.numel(), nccl_type(out.dtype()), 0, c.get(), s), what);
          };
          queue_transfer(lane, std::move(t));
        }
      }
    }
    if (!work && (!sends[p].unmatched().empty() || recvs[p].waiting())) {
      buffer = empty({rendezvous::kMessageBytes}, {.dtype = kUInt8});
      work = bootstrap->recv(buffer, p, kHandshakeTag);
    }
  }
  // A send that never learns of its recv, or the reverse, times out.
  for (const auto& [op, deadline] : handshake_deadlines)
    if (now > deadline)
      throw Error(detail::concat(op->where(), ": did not complete within ", seconds_text(timeout), " (rank ", op->peer,
                                 " never posted the matching ", op->kind == OpKind::Send ? "recv" : "send",
                                 "); a peer may have died, be stuck, or be waiting in a different operation"));
  // Handshakes and CPU point-to-point operations on the bootstrap group.
  for (auto it = handshakes_sent.begin(); it != handshakes_sent.end();) {
    if (!(*it)->is_completed()) {
      ++it;
      continue;
    }
    (*it)->wait();
    it = handshakes_sent.erase(it);
  }
  for (auto it = forwarded_p2p.begin(); it != forwarded_p2p.end();) {
    if (!it->second->is_completed()) {
      ++it;
      continue;
    }
    std::exception_ptr error;
    try {
      it->second->wait();
    } catch (...) {
      error = std::current_exception();
    }
    finish(*it->first, error);
    it = forwarded_p2p.erase(it);
    progress = true;
  }
  return progress;
}

bool NcclGroup::State::advance_lane(Lane& lane) {
  if (!lane.comm || lane.comm->aborted()) return false;
  const Clock::time_point now = Clock::now();
  if (lane.calling) {
    if (!lane.comm->ready(lane.calling->op->where())) {
      if (now > lane.calling->deadline)
        throw Error(detail::concat(lane.calling->op->where(), ": did not complete within ", seconds_text(timeout),
                                   " (", lane.calling->stage, "); a peer may have died, be stuck, or be waiting in a "
                                   "different operation"));
      return false;
    }
    std::shared_ptr<Transfer> t = std::move(lane.calling);
    lane.calling.reset();
    complete(lane, t);
    return true;
  }
  if (lane.queue.empty()) {
    lane.comm->ready(lane.name);  // reports an asynchronous error of an idle communicator
    return false;
  }
  std::shared_ptr<Transfer>& next = lane.queue.front();
  if (!lane.comm->ready(next->op->where())) {  // still joining
    if (now > next->deadline)
      throw Error(detail::concat(next->op->where(), ": did not complete within ", seconds_text(timeout),
                                 " (joining the NCCL communicator of ", lane.name, ")"));
    return false;
  }
  lane.calling = std::move(next);
  lane.queue.pop_front();
  Transfer& t = *lane.calling;
  t.stage = "enqueuing its NCCL calls";
  t.deadline = now + timeout;
  cuda::StreamGuard on_lane(lane.stream);
  if (t.ready) t.ready->wait(lane.stream);
  if (trace::enabled()) {
    t.name = t.op->describe();
    t.span = std::make_unique<trace::Span>(t.name.c_str(), "communication",
                                           trace::lane(detail::concat("rank", rank, "/nccl ", lane.name)),
                                           Device::cuda(device));
  }
  t.launch(*lane.comm, lane.stream.handle());
  return true;
}

// The NCCL calls are enqueued: the operation is finished as far as the host
// is concerned. wait() orders the waiting thread's stream after it.
void NcclGroup::State::complete(Lane& lane, const std::shared_ptr<Transfer>& t) {
  Op& op = *t->op;
  {
    cuda::StreamGuard on_lane(lane.stream);
    int64_t offset = 0;  // all_gather into a list: the gathered buffer into the outputs
    for (const Tensor& out : op.outputs) {
      copy_data(as_strided(op.output, out.shape(), contiguous_strides(out.shape()), op.output.storage_offset() + offset),
                out);
      offset += out.numel();
    }
    op.outputs.clear();  // copied: finish() must not copy them again
    t->done->record(lane.stream);
    t->span.reset();  // its end: here, on the lane's stream
  }
  t->stage = "running on the GPU";
  t->deadline = Clock::now() + timeout;
  op.work->set_device_ordering([done = t->done, outcome = t->outcome, device = device] {
    {
      std::lock_guard<std::mutex> lock(outcome->mutex);
      if (!outcome->error.empty()) throw Error(outcome->error);
    }
    done->wait(cuda::current_stream(device));
  });
  finish(op, nullptr);
  running.push_back(t);
}

bool NcclGroup::State::watch() {
  bool progress = false;
  const Clock::time_point now = Clock::now();
  for (auto it = running.begin(); it != running.end();) {
    if ((*it)->done->query()) {
      it = running.erase(it);
      progress = true;
      continue;
    }
    if (now > (*it)->deadline)
      throw Error(detail::concat((*it)->op->where(), ": did not complete on the GPU within ", seconds_text(timeout),
                                 "; a peer may have died, be stuck, or be waiting in a different operation"));
    ++it;
  }
  return progress;
}

// A timeout or an NCCL error: abort every communicator (their kernels end),
// fail everything not finished, and refuse what comes later.
void NcclGroup::State::fail_group(const std::string& why) {
  if (!failure.empty()) return;
  failure = why + ". The process group is now unusable (its NCCL communicators were aborted)";
  for (Lane* lane : lanes())
    if (lane->comm) lane->comm->abort();
  auto not_run = [&](Op& op) {  // the operation that failed says so first; the others were caught up in it
    const bool culprit = why.rfind(op.where(), 0) == 0;
    finish(op, error_of(culprit ? failure : detail::concat(op.where(), ": not run, the process group failed: ", failure)));
  };
  for (const auto& t : running) {
    std::lock_guard<std::mutex> lock(t->outcome->mutex);
    t->outcome->error = failure;
  }
  running.clear();
  for (Lane* lane : lanes()) {
    if (lane->calling) not_run(*lane->calling->op);
    lane->calling.reset();
    for (const auto& t : lane->queue) not_run(*t->op);
    lane->queue.clear();
  }
  for (Ordered& o : ordered)
    if (!o.forwarded) not_run(*o.op);  // forwarded ones end by the bootstrap group's own rules
  ordered.erase(std::remove_if(ordered.begin(), ordered.end(), [](const Ordered& o) { return !o.forwarded; }),
                ordered.end());
  for (int p = 0; p < size; ++p) {
    for (const OpPtr& op : sends[p].unmatched()) not_run(*op);
    for (const auto& [id, op] : recvs[p].pending()) not_run(*op);
    sends[p] = {};
    recvs[p] = {};
  }
  handshake_deadlines.clear();
  p2p_ready.clear();
}

// ---- NcclGroup ----

std::shared_ptr<ProcessGroup> NcclGroup::create(std::shared_ptr<ProcessGroup> bootstrap, Device device) {
  LOOM_CHECK(bootstrap, "NcclGroup::create: no bootstrap group");
  LOOM_CHECK(device.is_cuda(), "NcclGroup::create: NCCL moves CUDA tensors; got ", device);
  LOOM_CHECK(device.index() < cuda_device_count(), "NcclGroup::create: rank ", bootstrap->rank(), " asked for ",
             device, " but this machine has ", cuda_device_count(), " GPUs");
  Tensor id = zeros({rendezvous::kIdBytes}, {.dtype = kUInt8});
  if (bootstrap->rank() == 0) {
    const std::string made = NcclComm::new_id();
    std::memcpy(id.raw_data(), made.data(), made.size());
  }
  bootstrap->broadcast(id, 0)->wait();
  const std::string bytes(static_cast<const char*>(id.raw_data()), rendezvous::kIdBytes);
  return std::shared_ptr<ProcessGroup>(new NcclGroup(std::move(bootstrap), device, bytes));
}

NcclGroup::NcclGroup(std::shared_ptr<ProcessGroup> bootstrap, Device device, const std::string& id)
    : ProcessGroup(bootstrap->rank(), bootstrap->size(), bootstrap->options()), device_(device) {
  state_ = std::make_unique<State>(this, std::move(bootstrap), device, id);
}

NcclGroup::~NcclGroup() { state_.reset(); }

int NcclGroup::local_rank() const { return state_->bootstrap->local_rank(); }

void NcclGroup::enqueue(OpPtr op) { state_->issue(std::move(op)); }

std::shared_ptr<ProcessGroup> NcclGroup::make_subgroup(int color, const std::vector<int>&, int new_rank, int64_t) {
  std::shared_ptr<ProcessGroup> bootstrap = state_->bootstrap->split(color, new_rank);
  return bootstrap ? create(std::move(bootstrap), device_) : nullptr;
}

}  // namespace loom::parallel
