#include "parallel/comm/mpi_group.h"

// loom uses MPI's C API only. Without this, mpi.h pulls in Open MPI's C++
// bindings, whose inline functions need libmpi_cxx in unoptimised builds.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "parallel/comm/descriptor.h"
#include "parallel/comm/mpi_16bit.h"
#include "parallel/comm/op_queue.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace {

[[noreturn]] void throw_mpi_error(const char* call, int status, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  LOOM_FAIL(call, " failed (", file, ":", line, "): ", std::string(text, length));
}

}  // namespace

// Throws loom::Error naming the MPI call, where it was made and MPI's message.
// MPI returns errors instead of aborting: the runtime sets MPI_ERRORS_RETURN.
#define MPI_CHECK(call)                                                                    \
  do {                                                                                     \
    int mpi_check_status_ = (call);                                                        \
    if (mpi_check_status_ != MPI_SUCCESS)                                                  \
      throw_mpi_error(#call, mpi_check_status_, __FILE__, __LINE__);                       \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;

// How the communication thread waits for MPI. It must keep calling MPI_Test
// for data to move, so while any operation is moving data it polls back to
// back, yielding the CPU between polls. While operations only wait for their
// peers to join (the descriptor exchange) or for a message to arrive, it
// polls back to back for kSpinFor after the last change, then naps kNap
// between polls, so that a rank waiting for a slow peer leaves the cores to
// the computation. See docs/comm.md for measurements.
constexpr auto kSpinFor = std::chrono::milliseconds(2);
constexpr auto kNap = std::chrono::microseconds(50);

// all_reduce and broadcast move at most this much per MPI call. On the build
// machine Open MPI 4.1's MPI_Iallreduce falls off a cliff above ~16 MB (64 MB
// in one call: 0.04 GB/s; in 4 MB pieces: 0.8 GB/s), and pieces of a few MB
// cost nothing measurable below that. See docs/comm.md.
constexpr int64_t kChunkBytes = 4 << 20;

// What a send puts in front of the tensor's bytes, in the same message.
struct P2pHeader {
  int64_t dtype = -1;
  int64_t numel = 0;
};

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case kBool: return MPI_C_BOOL;
    case kUInt8: return MPI_UINT8_T;
    case kInt64: return MPI_INT64_T;
    case kFloat32: return MPI_FLOAT;
    case kFloat64: return MPI_DOUBLE;
    case kBFloat16:
    case kFloat16: return mpi_16bit_type(dtype);
  }
  LOOM_FAIL("mpi backend: unsupported dtype ", dtype);
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  if (is_16bit_floating(dtype)) return mpi_16bit_op(dtype, op);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return MPI_SUM;  // then divided by the group's size
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  LOOM_FAIL("mpi backend: unsupported reduce op");
}

// The layout of one point-to-point message: the header, then `numel`
// elements of `element_size` bytes at `data`, wherever those two are. Both
// parts are bytes to MPI, so sender and receiver always agree on the type and
// a dtype mismatch is found from the header, not left undefined.
MPI_Datatype message_type(P2pHeader* header, void* data, int64_t numel, size_t element_size) {
  MPI_Datatype element;
  MPI_CHECK(MPI_Type_contiguous(static_cast<int>(element_size), MPI_BYTE, &element));
  int lengths[2] = {static_cast<int>(sizeof(P2pHeader)), static_cast<int>(numel)};
  MPI_Aint addresses[2];
  MPI_CHECK(MPI_Get_address(header, &addresses[0]));
  MPI_CHECK(MPI_Get_address(numel > 0 ? data : header, &addresses[1]));
  MPI_Datatype types[2] = {MPI_BYTE, element};
  MPI_Datatype type;
  MPI_CHECK(MPI_Type_create_struct(2, lengths, addresses, types, &type));
  MPI_CHECK(MPI_Type_commit(&type));
  MPI_CHECK(MPI_Type_free(&element));
  return type;
}

void divide(const Tensor& t, int n) {
  dispatch_reducible(t.dtype(), "ReduceOp::Avg", [&](auto tag) {
    using T = decltype(tag);
    using Compute = compute_type_t<T>;
    T* data = static_cast<T*>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) data[i] = T(static_cast<Compute>(data[i]) / static_cast<Compute>(n));
  });
}

// One operation the communication thread has started.
struct InFlight {
  enum class Stage {
    Exchange,  // collective: waiting for every rank's descriptor
    Payload,   // the data is moving
    Probe,     // recv: waiting for the message to arrive
    Done,
  };

  InFlight(OpPtr op, Clock::time_point deadline) : op(std::move(op)), deadline(deadline) {}

  OpPtr op;
  Clock::time_point deadline;
  Stage stage = Stage::Done;
  MPI_Request request = MPI_REQUEST_NULL;
  Descriptor mine;
  std::vector<Descriptor> all;     // every rank's descriptor, in rank order
  std::vector<int> counts, displs;  // all_gather, reduce_scatter: elements per rank
  int64_t next = 0;                 // all_reduce, broadcast: first element of the next chunk
  P2pHeader header;
  std::vector<char> scratch;  // recv: a message whose size does not match lands here
  // reduce_scatter in place: MPI's in-place layout differs from NCCL's (the
  // result would land at the start of the input), so it lands here first.
  std::vector<char> in_place_result;
  std::exception_ptr error;   // this op failed, but the group is fine (the ranks disagreed)
};

const char* stage_text(const InFlight& p) {
  switch (p.stage) {
    case InFlight::Stage::Exchange: return "waiting for the other ranks to join";
    case InFlight::Stage::Payload: return "moving the data";
    case InFlight::Stage::Probe: return "waiting for the message";
    case InFlight::Stage::Done: return "done";
  }
  return "";
}

}  // namespace

// MPI can be initialised once per process and finalised once, so one object
// owns both ends: a function-local static, created by the first MpiGroup and
// destroyed at exit. Groups register with it so that it can stop their
// communication threads before MPI_Finalize.
class MpiRuntime {
 public:
  // argc and argv go to MPI_Init_thread on the first call.
  static MpiRuntime& get(int* argc, char*** argv) {
    static MpiRuntime runtime(argc, argv);
    return runtime;
  }

  void attach(MpiGroup::State* state);
  void detach(MpiGroup::State* state);
  // A group failed or the program gave up: MPI_Finalize would wait for a
  // peer that may never come.
  void note_failure(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failure_.empty()) failure_ = why;
  }
  ~MpiRuntime();

 private:
  MpiRuntime(int* argc, char*** argv);
  std::mutex mutex_;
  std::set<MpiGroup::State*> groups_;
  std::string failure_;
  bool owns_mpi_ = false;  // false when someone else initialised MPI
};

struct MpiGroup::State {
  MpiRuntime* runtime = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;
  OpQueue queue;
  std::thread thread;
  std::mutex stop_mutex;
  bool stopped = false;
  bool attached = false;  // registered with the runtime (cleared by it at exit)
  std::string failure;    // set once by the communication thread: the group is unusable
  // Ops that failed with MPI requests still pending: MPI may write into their
  // tensors later, so they (and the tensors) are never freed.
  std::vector<std::unique_ptr<InFlight>> abandoned;

  // Lets the communication thread finish what is queued, then joins it.
  void stop() {
    std::lock_guard<std::mutex> lock(stop_mutex);
    if (stopped) return;
    queue.close();
    if (thread.joinable()) thread.join();
    stopped = true;
  }
};

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0, provided = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) {
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    MPI_CHECK(MPI_Query_thread(&provided));
  }
  LOOM_CHECK(provided >= MPI_THREAD_MULTIPLE,
             "mpi backend: this MPI library does not support MPI_THREAD_MULTIPLE (provided level ",
             provided, "); loom's communication thread needs it");
  // Errors come back as return codes, which MPI_CHECK turns into loom::Error.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
}

MpiRuntime::~MpiRuntime() {
  std::set<MpiGroup::State*> groups;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    groups.swap(groups_);
  }
  for (MpiGroup::State* state : groups) {
    state->stop();
    state->attached = false;
  }
  if (!owns_mpi_) return;
  if (failure_.empty()) {
    free_mpi_16bit();
    MPI_Finalize();
  } else {
    std::fprintf(stderr,
                 "loom: not calling MPI_Finalize, which would wait for the other ranks, because %s\n",
                 failure_.c_str());
  }
}

void MpiRuntime::attach(MpiGroup::State* state) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.insert(state);
  state->runtime = this;
  state->attached = true;
}

void MpiRuntime::detach(MpiGroup::State* state) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.erase(state);
  state->attached = false;
}

void MpiGroup::abandon(const std::string& why) {
  int initialized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return;
  MpiRuntime::get(nullptr, nullptr).note_failure("this rank gave up: " + why);
}

struct MpiGroup::Communicator {
  MPI_Comm comm;
};

std::shared_ptr<ProcessGroup> MpiGroup::world(ProcessGroupOptions options, int* argc, char*** argv) {
  MpiRuntime::get(argc, argv);
  MPI_Comm comm;
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  std::shared_ptr<ProcessGroup> group = on(Communicator{comm}, options);
  static_cast<MpiGroup&>(*group).record_group();  // as "world" (split() records a subgroup once it is named)
  return group;
}

// A group on `c.comm`, which it then owns; its communication thread starts here.
std::shared_ptr<ProcessGroup> MpiGroup::on(const Communicator& c, ProcessGroupOptions options) {
  MpiRuntime& runtime = MpiRuntime::get(nullptr, nullptr);
  MPI_Comm comm = c.comm;
  int rank = 0, size = 1, local_rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  // The ranks that share this machine (and its GPUs), whatever the launcher.
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank));
  MPI_CHECK(MPI_Comm_free(&node));

  std::shared_ptr<MpiGroup> group(new MpiGroup(rank, size, local_rank, options));
  group->state_->comm = comm;
  runtime.attach(group->state_.get());
  group->state_->thread = std::thread([g = group.get()] { g->run(); });
  return group;
}

MpiGroup::MpiGroup(int rank, int size, int local_rank, ProcessGroupOptions options)
    : ProcessGroup(rank, size, options), local_rank_(local_rank), state_(std::make_unique<State>()) {}

MpiGroup::~MpiGroup() {
  state_->stop();
  if (!state_->attached) return;  // MPI is finalised already: nothing to free
  state_->runtime->detach(state_.get());
  if (state_->failure.empty()) MPI_Comm_free(&state_->comm);
}

void MpiGroup::enqueue(OpPtr op) { state_->queue.push(std::move(op)); }

// MPI's own split, on the calling thread: everything issued before has
// finished (ProcessGroup::split waited for it), so the communicator is idle.
std::shared_ptr<ProcessGroup> MpiGroup::make_subgroup(int color, const std::vector<int>&, int new_rank, int64_t) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(state_->comm, color < 0 ? MPI_UNDEFINED : color, new_rank, &sub));
  if (sub == MPI_COMM_NULL) return nullptr;
  return on(Communicator{sub}, options());
}

namespace {

// The steps of one operation; all run on the communication thread. MPI errors
// throw (and break the group); a disagreement between ranks sets p.error.
class Driver {
 public:
  Driver(MPI_Comm comm, const ProcessGroupOptions& options) : comm_(comm), options_(options) {}

  void start(InFlight& p) {
    const Op& op = *p.op;
    switch (op.kind) {
      case OpKind::Send: {
        p.header = {static_cast<int64_t>(op.input.dtype()), op.input.numel()};
        MPI_Datatype type = message_type(&p.header, op.input.raw_data(), op.input.numel(),
                                         op.input.element_size());
        MPI_CHECK(MPI_Isend(MPI_BOTTOM, 1, type, op.peer, op.tag, comm_, &p.request));
        MPI_CHECK(MPI_Type_free(&type));  // MPI keeps it until the send is done
        p.stage = InFlight::Stage::Payload;
        return;
      }
      case OpKind::Recv: p.stage = InFlight::Stage::Probe; return;
      default: break;
    }
    p.mine = make_descriptor(op);
    // all_gather and reduce_scatter need every rank's size to place the data.
    bool exchange = options_.check_consistency || op.kind == OpKind::AllGather ||
                    op.kind == OpKind::ReduceScatter;
    if (!exchange) return start_payload(p);
    p.all.resize(op.group_size);
    MPI_CHECK(MPI_Iallgather(&p.mine, kDescriptorWords, MPI_INT64_T, p.all.data(),
                             kDescriptorWords, MPI_INT64_T, comm_, &p.request));
    p.stage = InFlight::Stage::Exchange;
  }

  // Moves p on if MPI has; returns whether it did. `probing` holds the
  // (src, tag) pairs of earlier receives still waiting for their message: a
  // later receive from the same pair must not take a message before them.
  bool advance(InFlight& p, std::set<std::pair<int, int>>& probing) {
    switch (p.stage) {
      case InFlight::Stage::Exchange:
        if (!test(p)) return false;
        try {
          check_descriptors(*p.op, p.all);
        } catch (const Error&) {
          p.error = std::current_exception();  // every rank saw the same; nothing was sent
          p.stage = InFlight::Stage::Done;
          return true;
        }
        start_payload(p);
        return true;
      case InFlight::Stage::Payload:
        if (!test(p)) return false;
        if (is_chunked(p.op->kind) && p.next < p.op->output.numel()) {
          start_chunk(p);
          return true;
        }
        on_payload_done(p);
        return true;
      case InFlight::Stage::Probe: {
        if (!probing.insert({p.op->peer, p.op->tag}).second) return false;
        int found = 0;
        MPI_Message message;
        MPI_Status status;
        MPI_CHECK(MPI_Improbe(p.op->peer, p.op->tag, comm_, &found, &message, &status));
        if (!found) return false;
        receive(p, message, status);
        return true;
      }
      case InFlight::Stage::Done: return false;
    }
    return false;
  }

 private:
  bool test(InFlight& p) {
    int done = 0;
    MPI_CHECK(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

  static bool is_chunked(OpKind kind) { return kind == OpKind::AllReduce || kind == OpKind::Broadcast; }

  // Starts the MPI call for the next kChunkBytes of an all_reduce or broadcast.
  void start_chunk(InFlight& p) {
    const Op& op = *p.op;
    const int64_t chunk = std::max<int64_t>(1, kChunkBytes / static_cast<int64_t>(op.output.element_size()));
    const int count = static_cast<int>(std::min(chunk, op.output.numel() - p.next));
    char* data = static_cast<char*>(op.output.raw_data()) + p.next * op.output.element_size();
    if (op.kind == OpKind::AllReduce)
      MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data, count, mpi_type(op.dtype()), mpi_op(op.reduce, op.dtype()), comm_,
                               &p.request));
    else
      MPI_CHECK(MPI_Ibcast(data, count, mpi_type(op.dtype()), op.peer, comm_, &p.request));
    p.next += count;
  }

  void start_payload(InFlight& p) {
    const Op& op = *p.op;
    const int n = op.group_size;
    MPI_Datatype type = op.kind == OpKind::Barrier ? MPI_BYTE : mpi_type(op.dtype());
    switch (op.kind) {
      case OpKind::AllReduce:
      case OpKind::Broadcast: start_chunk(p); break;
      case OpKind::AllGather:
      case OpKind::ReduceScatter: {
        std::vector<int64_t> counts = split_counts(p.all, op.kind);
        p.counts.assign(counts.begin(), counts.end());
        p.displs.assign(n, 0);
        for (int r = 1; r < n; ++r) p.displs[r] = p.displs[r - 1] + p.counts[r - 1];
        const bool in_place = p.mine.in_place_at >= 0;
        if (op.kind == OpKind::AllGather) {
          MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : op.input.raw_data(), static_cast<int>(op.input.numel()),
                                    type, op.output.raw_data(), p.counts.data(), p.displs.data(), type, comm_,
                                    &p.request));
        } else {
          if (in_place) p.in_place_result.resize(op.output.nbytes());
          MPI_CHECK(MPI_Ireduce_scatter(op.input.raw_data(), in_place ? p.in_place_result.data() : op.output.raw_data(),
                                        p.counts.data(), type, mpi_op(op.reduce, op.dtype()), comm_, &p.request));
        }
        break;
      }
      case OpKind::Barrier: MPI_CHECK(MPI_Ibarrier(comm_, &p.request)); break;
      default: LOOM_INTERNAL_ASSERT(false, "not a collective: ", op_kind_name(op.kind));
    }
    p.stage = InFlight::Stage::Payload;
  }

  // The message for recv p has arrived (matched, so no other receive can take
  // it): receive it into the tensor if its size is right, else aside.
  void receive(InFlight& p, MPI_Message& message, MPI_Status& status) {
    const Op& op = *p.op;
    MPI_Count bytes = 0;
    MPI_CHECK(MPI_Get_elements_x(&status, MPI_BYTE, &bytes));
    const MPI_Count expected = sizeof(P2pHeader) + op.output.nbytes();
    if (bytes == expected) {
      MPI_Datatype type = message_type(&p.header, op.output.raw_data(), op.output.numel(),
                                       op.output.element_size());
      MPI_CHECK(MPI_Imrecv(MPI_BOTTOM, 1, type, &message, &p.request));
      MPI_CHECK(MPI_Type_free(&type));
    } else {
      LOOM_CHECK(bytes <= INT_MAX, "a mismatched message of ", bytes, " bytes is too large to inspect");
      p.scratch.resize(bytes);
      MPI_CHECK(MPI_Imrecv(p.scratch.data(), static_cast<int>(bytes), MPI_BYTE, &message, &p.request));
    }
    p.stage = InFlight::Stage::Payload;
  }

  void on_payload_done(InFlight& p) {
    const Op& op = *p.op;
    p.stage = InFlight::Stage::Done;
    if (!p.in_place_result.empty()) {
      std::memcpy(op.output.raw_data(), p.in_place_result.data(), p.in_place_result.size());
      std::vector<char>().swap(p.in_place_result);
    }
    if (op.reduce == ReduceOp::Avg &&
        (op.kind == OpKind::AllReduce || op.kind == OpKind::ReduceScatter))
      divide(op.output, op.group_size);
    if (op.kind != OpKind::Recv) return;
    if (!p.scratch.empty()) {
      if (p.scratch.size() >= sizeof(P2pHeader)) std::memcpy(&p.header, p.scratch.data(), sizeof(P2pHeader));
      else p.header = {};
    }
    if (p.header.dtype == static_cast<int64_t>(op.output.dtype()) && p.header.numel == op.output.numel())
      return;
    std::string sent = p.header.dtype < 0
                           ? std::string("a message that is not from loom")
                           : detail::concat(p.header.numel, " x ", static_cast<DType>(p.header.dtype));
    p.error = std::make_exception_ptr(Error(detail::concat(
        op.where(), ": rank ", op.peer, " sent ", sent, ", but this recv expects ", op.output.numel(),
        " x ", op.output.dtype())));
  }

  MPI_Comm comm_;
  const ProcessGroupOptions& options_;
};

}  // namespace

void MpiGroup::run() {
  State& s = *state_;
  Driver driver(s.comm, options());
  std::deque<OpPtr> waiting;                      // issued, not started
  std::deque<std::unique_ptr<InFlight>> running;  // started, in issue order
  auto last_change = Clock::now();

  // The group cannot be trusted any more: fail everything running.
  auto break_group = [&](const std::string& why, InFlight* culprit) {
    s.failure = why;
    s.runtime->note_failure("a process group failed: " + why);
    group_failed(why);  // the flight record, before the failure reaches anyone
    for (auto& p : running) {
      if (p->stage == InFlight::Stage::Done) continue;
      p->error = std::make_exception_ptr(Error(
          p.get() == culprit ? why
                             : detail::concat(p->op->where(), ": aborted, the process group failed: ", why)));
      p->stage = InFlight::Stage::Done;
    }
  };

  for (;;) {
    if (waiting.empty() && running.empty()) {
      OpPtr op = s.queue.pop();  // sleeps while there is nothing to do
      if (!op) return;
      waiting.push_back(std::move(op));
    }
    while (OpPtr op = s.queue.try_pop()) waiting.push_back(std::move(op));
    bool changed = false;

    // Start operations in issue order: sends and receives at once; a
    // collective only when no other collective is running, so that every rank
    // starts its MPI collectives in the same order.
    auto collective_running = [&] {
      for (auto& p : running)
        if (!is_p2p(p->op->kind) && p->stage != InFlight::Stage::Done) return true;
      return false;
    };
    while (s.failure.empty() && !waiting.empty() &&
           (is_p2p(waiting.front()->kind) || !collective_running())) {
      running.push_back(std::make_unique<InFlight>(std::move(waiting.front()),
                                                   Clock::now() + options().timeout));
      waiting.pop_front();
      changed = true;
      mark_started(*running.back()->op);
      try {
        driver.start(*running.back());
      } catch (const std::exception& e) {
        break_group(detail::concat(running.back()->op->where(), ": ", e.what()), running.back().get());
      }
    }

    std::set<std::pair<int, int>> probing;
    for (auto& p : running) {
      if (!s.failure.empty()) break;
      try {
        changed |= driver.advance(*p, probing);
      } catch (const std::exception& e) {
        break_group(detail::concat(p->op->where(), ": ", e.what()), p.get());
        break;
      }
      if (p->stage != InFlight::Stage::Done && Clock::now() > p->deadline) {
        break_group(detail::concat(p->op->where(), ": did not complete within ",
                                   seconds_text(options().timeout), " (", stage_text(*p),
                                   "); a peer may have died, be stuck, or be waiting in a different "
                                   "operation. The process group is now unusable"),
                    p.get());
        break;
      }
    }

    // Finish a send or receive as soon as its own message has gone or
    // arrived, a collective once every operation issued before it has
    // finished too. A receive must not wait for an earlier send: that send's
    // (rendezvous) message may wait for a receive its peer posts only after
    // this one (the interleaved pipeline's header, then activation).
    for (auto it = running.begin(); it != running.end();) {
      const bool may_finish = is_p2p((*it)->op->kind) || it == running.begin();
      if ((*it)->stage != InFlight::Stage::Done || !may_finish) {
        ++it;
        continue;
      }
      std::unique_ptr<InFlight> p = std::move(*it);
      it = running.erase(it);
      finish(*p->op, p->error);
      if (p->request != MPI_REQUEST_NULL) s.abandoned.push_back(std::move(p));
      changed = true;
    }
    if (!s.failure.empty()) {
      for (OpPtr& op : waiting)
        finish(*op, std::make_exception_ptr(Error(detail::concat(
                        op->where(), ": not run, the process group failed earlier: ", s.failure))));
      changed |= !waiting.empty();
      waiting.clear();
    }

    bool moving = false;
    for (auto& p : running) moving |= p->stage == InFlight::Stage::Payload;
    if (changed) {
      last_change = Clock::now();
    } else if (moving || Clock::now() - last_change < kSpinFor) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kNap);
    }
  }
}

}  // namespace loom::parallel
