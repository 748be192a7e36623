#include "parallel/comm/thread_group.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <type_traits>

#include "parallel/comm/descriptor.h"
#include "parallel/comm/spin.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace {

// What rank r publishes for the collective it is running.
struct Slot {
  Descriptor descriptor;
  const Op* op = nullptr;
};

struct Message {
  DType dtype;
  int64_t numel;
  std::vector<char> bytes;
};

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

const char* data_of(const Tensor& t) { return static_cast<const char*>(t.raw_data()); }
char* mutable_data_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// memcpy, which must not see the null data of an empty tensor, nor a piece
// onto itself (an in-place all_gather's own piece).
void copy_bytes(void* dst, const void* src, size_t count) {
  if (count > 0 && dst != src) std::memcpy(dst, src, count);
}

// out[i] = in[0][first + i] (op) in[1][first + i] (op) ... for i in [0, count),
// combining the ranks in rank order so that every element is computed the same
// way whichever rank computes it. `out` may be one of the inputs (all_reduce
// is in place), so each block is reduced into a local buffer first; the plain
// loops over it vectorise. 16-bit floats are combined in float32 and rounded
// once (Acc, compute_type_t).
template <typename T, typename Acc, typename Combine>
void reduce(const std::vector<const T*>& in, int64_t first, int64_t count, T* out,
            Combine combine, bool average) {
  constexpr int64_t kBlock = 1024;
  Acc acc[kBlock];
  const int n = static_cast<int>(in.size());
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t len = std::min(kBlock, count - begin);
    const T* src = in[0] + first + begin;
    for (int64_t i = 0; i < len; ++i) acc[i] = static_cast<Acc>(src[i]);
    for (int q = 1; q < n; ++q) {
      src = in[q] + first + begin;
      for (int64_t i = 0; i < len; ++i) acc[i] = combine(acc[i], static_cast<Acc>(src[i]));
    }
    if (average)
      for (int64_t i = 0; i < len; ++i) acc[i] = acc[i] / static_cast<Acc>(n);
    if constexpr (std::is_same_v<T, Acc>) {
      copy_bytes(out + begin, acc, len * sizeof(T));
    } else {
      for (int64_t i = 0; i < len; ++i) out[begin + i] = T(acc[i]);
    }
  }
}

template <typename T>
void reduce(ReduceOp op, const std::vector<const T*>& in, int64_t first, int64_t count, T* out) {
  using Acc = compute_type_t<T>;
  switch (op) {
    case ReduceOp::Sum: return reduce<T, Acc>(in, first, count, out, [](Acc a, Acc b) -> Acc { return a + b; }, false);
    case ReduceOp::Avg: return reduce<T, Acc>(in, first, count, out, [](Acc a, Acc b) -> Acc { return a + b; }, true);
    case ReduceOp::Max: return reduce<T, Acc>(in, first, count, out, [](Acc a, Acc b) { return std::max(a, b); }, false);
    case ReduceOp::Min: return reduce<T, Acc>(in, first, count, out, [](Acc a, Acc b) { return std::min(a, b); }, false);
  }
}

// reduce() over the ranks' tensors, for any numeric dtype.
void reduce_slice(const Op& op, const std::vector<const Op*>& peers, bool from_inputs,
                  int64_t first, int64_t count, const Tensor& out, int64_t out_first) {
  dispatch_reducible(op.dtype(), op_kind_name(op.kind), [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> in;
    for (const Op* peer : peers)
      in.push_back(static_cast<const T*>((from_inputs ? peer->input : peer->output).raw_data()));
    reduce<T>(op.reduce, in, first, count, static_cast<T*>(out.raw_data()) + out_first);
  });
}

// Where rank r's piece starts when `counts` elements go to each rank.
std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t r = 0; r < counts.size(); ++r) offsets[r + 1] = offsets[r] + counts[r];
  return offsets;
}

}  // namespace

struct ThreadGroup::Shared {
  explicit Shared(int size) : size(size), arrivals(size, 0), departed(size, false), slots(size) {}

  const int size;
  std::mutex mutex;  // guards everything below
  std::condition_variable changed;
  std::vector<int64_t> arrivals;  // how many meet() points each rank has reached
  // The sum of arrivals, readable without the mutex: every rank has reached
  // meet point k exactly when it is at least k * size (no rank passes k
  // before all reach it, so none is beyond k while one is short of it).
  std::atomic<int64_t> total_arrivals{0};
  std::vector<bool> departed;     // ranks whose ProcessGroup was destroyed
  std::vector<Slot> slots;
  std::string failure;  // why the group is unusable; empty while it is fine
  std::map<std::tuple<int, int, int>, std::deque<Message>> mailboxes;  // (src, dst, tag)
  // Subgroups being handed out: the first member to arrive makes them all.
  struct Subgroups {
    std::vector<std::shared_ptr<ProcessGroup>> ranks;
    size_t taken = 0;
  };
  std::map<int64_t, Subgroups> subgroups;  // by split id
};

std::shared_ptr<ProcessGroup> ThreadGroup::make_subgroup(int color, const std::vector<int>& members, int new_rank,
                                                         int64_t id) {
  if (color < 0) return nullptr;
  std::lock_guard<std::mutex> lock(shared_->mutex);
  Shared::Subgroups& made = shared_->subgroups[id];
  if (made.ranks.empty()) made.ranks = create(static_cast<int>(members.size()), options());
  std::shared_ptr<ProcessGroup> mine = std::move(made.ranks[new_rank]);
  if (++made.taken == members.size()) shared_->subgroups.erase(id);
  return mine;
}

std::vector<std::shared_ptr<ProcessGroup>> ThreadGroup::create(int size,
                                                               ProcessGroupOptions options) {
  LOOM_CHECK(size >= 1, "ThreadGroup::create: expected at least one rank, got ", size);
  // Every job of threads in a process is a "world" of its own; the flight
  // record, one per process, tells them apart by a number (a count, like
  // trace lanes, not state anything depends on).
  static std::atomic<int64_t> jobs{0};
  const int64_t job = jobs++;
  const std::string name = job == 0 ? "world" : detail::concat("world-", job);
  auto shared = std::make_shared<Shared>(size);
  std::vector<std::shared_ptr<ProcessGroup>> groups;
  for (int r = 0; r < size; ++r) {
    std::shared_ptr<ThreadGroup> group(new ThreadGroup(r, shared, options));
    group->set_name(name);
    group->record_group();
    groups.push_back(std::move(group));
  }
  return groups;
}

ThreadGroup::ThreadGroup(int rank, std::shared_ptr<Shared> shared, ProcessGroupOptions options)
    : ProcessGroup(rank, shared->size, options), shared_(std::move(shared)) {
  thread_ = std::thread([this] { run(); });
}

ThreadGroup::~ThreadGroup() {
  queue_.close();
  thread_.join();  // runs what is still queued; each op ends by its timeout at the latest
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->departed[rank()] = true;
  }
  shared_->changed.notify_all();
}

void ThreadGroup::run() {
  while (OpPtr op = queue_.pop()) {
    mark_started(*op);
    std::exception_ptr error;
    try {
      execute(*op, Clock::now() + options().timeout);
    } catch (...) {
      error = std::current_exception();
      std::lock_guard<std::mutex> lock(shared_->mutex);
      if (!shared_->failure.empty()) note_group_failed(shared_->failure);
    }
    finish(*op, error);
  }
}

void ThreadGroup::execute(const Op& op, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    LOOM_CHECK(shared_->failure.empty(), op.where(),
               ": not run, the process group failed earlier: ", shared_->failure);
  }
  switch (op.kind) {
    case OpKind::Send: return send(op);
    case OpKind::Recv: return recv(op, deadline);
    default: return collective(op, deadline);
  }
}

void ThreadGroup::meet(const Op& op, Clock::time_point deadline) {
  Shared& s = *shared_;
  std::unique_lock<std::mutex> lock(s.mutex);
  const int64_t target = ++s.arrivals[rank()];
  s.total_arrivals.fetch_add(1, std::memory_order_release);
  s.changed.notify_all();
  lock.unlock();
  const int64_t everyone = target * s.size;
  if (spin_briefly([&] { return s.total_arrivals.load(std::memory_order_acquire) >= everyone; })) return;
  lock.lock();
  auto missing = [&] {
    std::vector<int> ranks;
    for (int q = 0; q < s.size; ++q)
      if (s.arrivals[q] < target) ranks.push_back(q);
    return ranks;
  };
  for (;;) {
    std::vector<int> absent = missing();
    if (absent.empty()) return;
    LOOM_CHECK(s.failure.empty(), op.where(), ": aborted, the process group failed: ", s.failure);
    for (int q : absent)
      LOOM_CHECK(!s.departed[q], op.where(), ": rank ", q,
                 " has left the group (its ProcessGroup was destroyed) without joining");
    if (s.changed.wait_until(lock, deadline) == std::cv_status::timeout && !missing().empty()) {
      s.failure = detail::concat(op.where(), ": timed out after ", seconds_text(options().timeout),
                                 " waiting for ", rank_list(missing()),
                                 " (never called it, is stuck, or called something else); "
                                 "the process group is now unusable");
      s.changed.notify_all();
      fail_group(lock);
    }
  }
}

// This rank found the group unusable and set shared_->failure: the flight
// record is written outside the lock the other ranks wait on, then the
// failure is thrown.
void ThreadGroup::fail_group(std::unique_lock<std::mutex>& lock) {
  const std::string why = shared_->failure;
  lock.unlock();
  group_failed(why);
  LOOM_FAIL(why);
}

void ThreadGroup::collective(const Op& op, Clock::time_point deadline) {
  Shared& s = *shared_;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.slots[rank()] = Slot{make_descriptor(op), &op};
  }
  meet(op, deadline);
  // Until the last meet() below, every rank's slot and tensors stay as published.
  std::vector<Descriptor> descriptors;
  std::vector<const Op*> peers;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const Slot& slot : s.slots) {
      descriptors.push_back(slot.descriptor);
      peers.push_back(slot.op);
    }
  }
  try {
    check_descriptors(op, descriptors);
  } catch (const Error&) {
    meet(op, deadline);  // every rank found the same mismatch; leave together
    throw;
  }

  const int n = size(), r = rank();
  switch (op.kind) {
    case OpKind::AllReduce: {
      // Reduce-scatter: rank r owns elements [first[r], first[r+1]) and reduces
      // them into its own tensor; nobody else reads or writes that range now.
      std::vector<int64_t> first(n + 1);
      for (int q = 0; q <= n; ++q) first[q] = op.input.numel() * q / n;
      reduce_slice(op, peers, true, first[r], first[r + 1] - first[r], op.output, first[r]);
      meet(op, deadline);
      // All-gather: copy every other slice from the rank that owns it.
      const size_t item = op.output.element_size();
      for (int q = 0; q < n; ++q)
        if (q != r)
          copy_bytes(mutable_data_of(op.output) + first[q] * item,
                      data_of(peers[q]->output) + first[q] * item, (first[q + 1] - first[q]) * item);
      break;
    }
    case OpKind::Broadcast:
      if (r != op.peer)
        copy_bytes(mutable_data_of(op.output), data_of(peers[op.peer]->input),
                    op.output.nbytes());
      break;
    case OpKind::AllGather: {
      std::vector<int64_t> at = offsets_of(split_counts(descriptors, op.kind));
      const size_t item = op.output.element_size();
      for (int q = 0; q < n; ++q)
        copy_bytes(mutable_data_of(op.output) + at[q] * item, data_of(peers[q]->input),
                    (at[q + 1] - at[q]) * item);
      break;
    }
    case OpKind::ReduceScatter: {
      std::vector<int64_t> at = offsets_of(split_counts(descriptors, op.kind));
      reduce_slice(op, peers, true, at[r], at[r + 1] - at[r], op.output, 0);
      break;
    }
    case OpKind::Barrier: break;
    default: LOOM_INTERNAL_ASSERT(false, "not a collective: ", op_kind_name(op.kind));
  }
  meet(op, deadline);  // nobody reads this rank's tensors any more
}

void ThreadGroup::send(const Op& op) {
  Message message{op.input.dtype(), op.input.numel(), {}};
  message.bytes.assign(data_of(op.input), data_of(op.input) + op.input.nbytes());
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->mailboxes[{rank(), op.peer, op.tag}].push_back(std::move(message));
  }
  shared_->changed.notify_all();
}

void ThreadGroup::recv(const Op& op, Clock::time_point deadline) {
  Shared& s = *shared_;
  Message message;
  {
    std::unique_lock<std::mutex> lock(s.mutex);
    std::deque<Message>& box = s.mailboxes[{op.peer, rank(), op.tag}];
    while (box.empty()) {
      LOOM_CHECK(s.failure.empty(), op.where(), ": aborted, the process group failed: ", s.failure);
      LOOM_CHECK(!s.departed[op.peer], op.where(), ": rank ", op.peer,
                 " has left the group (its ProcessGroup was destroyed) without sending");
      if (s.changed.wait_until(lock, deadline) == std::cv_status::timeout && box.empty()) {
        s.failure = detail::concat(op.where(), ": timed out after ", seconds_text(options().timeout),
                                   ": no message from rank ", op.peer, " with tag ", op.tag,
                                   " arrived; the process group is now unusable");
        s.changed.notify_all();
        fail_group(lock);
      }
    }
    message = std::move(box.front());
    box.pop_front();
  }
  LOOM_CHECK(message.dtype == op.output.dtype() && message.numel == op.output.numel(), op.where(),
             ": rank ", op.peer, " sent ", message.numel, " x ", message.dtype, ", but this recv expects ",
             op.output.numel(), " x ", op.output.dtype());
  copy_bytes(mutable_data_of(op.output), message.bytes.data(), message.bytes.size());
}

}  // namespace loom::parallel
