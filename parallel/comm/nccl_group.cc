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
// This file holds the group's life and that loop; the steps are in
// nccl_ordered.cc, nccl_handshakes.cc and nccl_lanes.cc, over the state in
// nccl_group_state.h.
#include "parallel/comm/nccl_group.h"

#include <cuda_runtime_api.h>

#include "parallel/comm/nccl_group_state.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"

namespace loom::parallel {
namespace nccl {

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

char* address(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw_data()) + element * static_cast<int64_t>(t.element_size());
}

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

}  // namespace nccl

using namespace nccl;

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
  cuda::set_thread_device(device);  // NCCL joins on the current device
  collectives.name = "collectives";
  collectives.stream = cuda::Stream::dedicated(device);
  collectives.comm = std::make_unique<NcclComm>(id, size, rank);
  for (int p = 0; p < size; ++p) {  // their streams: at their first operation (stream_of)
    to[p].name = detail::concat("sends to rank ", p);
    from[p].name = detail::concat("receives from rank ", p);
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
    const cuda::Stream stream = stream_of(*op);
    // A tensor on another device is accept()'s to refuse, with the operation's name.
    auto record = [&](const Tensor& t) {
      if (t.defined() && t.device() == Device::cuda(device)) cuda::record_stream(t, stream);
    };
    record(op->input);
    record(op->output);
    for (const Tensor& t : op->outputs) record(t);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    incoming.push_back({std::move(op), std::move(ready), Clock::now()});
  }
  wake.notify_all();
}

// The stream of the lane `op` goes on. A channel's is made at its first
// operation, as most groups never send point to point; the communication
// thread first reads it after taking that operation from `incoming`, under
// the same mutex.
cuda::Stream NcclGroup::State::stream_of(const Op& op) {
  Lane& lane = op.kind == OpKind::Send ? to[op.peer] : op.kind == OpKind::Recv ? from[op.peer] : collectives;
  std::lock_guard<std::mutex> lock(mutex);
  if (lane.stream.handle() == nullptr) lane.stream = cuda::Stream::dedicated(device);
  return lane.stream;
}

void NcclGroup::State::run() {
  try {
    cuda::set_thread_device(device);  // the channels' communicators are made on this thread
  } catch (const std::exception& e) {
    fail_group(e.what());
  }
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
  // After a failure a posted handshake recv may never complete (its peer is
  // gone): closing must not wait for it. Its op keeps its buffer alive.
  if (failure.empty())
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
  const Device expected = on_gpu(*op) ? Device::cuda(device) : Device::cpu();
  std::vector<Tensor> tensors = op->outputs;  // all_gather's list too: complete() copies into it on the lane's stream
  tensors.push_back(op->input);
  tensors.push_back(op->output);
  for (const Tensor& t : tensors)
    if (t.defined() && t.device() != expected) {
      finish(*op, error_of(detail::concat(op->where(), ": the nccl backend needs all of an operation's tensors on one "
                                          "device; got ", expected, " and ", t.device())));
      return;
    }
  if (!is_p2p(op->kind)) {
    Ordered o;
    o.op = std::move(op);
    o.ready = std::move(ready);
    ordered.push_back(std::move(o));
    return;
  }
  group->mark_started(*op);  // its handshake, or the bootstrap group's transfer, starts now
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


// A timeout or an NCCL error: abort every communicator (their kernels end),
// fail everything not finished, and refuse what comes later.
void NcclGroup::State::fail_group(const std::string& why) {
  if (!failure.empty()) return;
  failure = why + ". The process group is now unusable (its NCCL communicators were aborted)";
  group->group_failed(failure);  // the flight record, before the failure reaches anyone
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
  record_no_spans();  // its spans are the GPU's time (nccl_lanes.cc)
  derive_from(*bootstrap, "+nccl");
  record_group();
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
