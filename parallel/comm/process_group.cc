#include "parallel/comm/process_group.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "parallel/comm/descriptor.h"
#include "parallel/trace.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

std::chrono::milliseconds default_timeout() {
  const char* text = std::getenv("LOOM_COMM_TIMEOUT_SECONDS");
  if (text == nullptr || *text == '\0') return std::chrono::minutes(5);
  // A range, so that every value taken is what it says: far above it, the
  // deadline overflows the clock (1e10 s failed at once, 1e16 s became 1 ms).
  constexpr double kMin = 0.001, kMax = 30 * 24 * 3600.0;
  char* end = nullptr;
  double seconds = std::strtod(text, &end);
  LOOM_CHECK(*end == '\0' && std::isfinite(seconds) && seconds >= kMin && seconds <= kMax,
             "LOOM_COMM_TIMEOUT_SECONDS: expected a positive number of seconds, from 0.001 to 2592000 (30 days), ",
             "got '", text, "'");
  return std::chrono::milliseconds(std::llround(seconds * 1000));
}

ProcessGroup::ProcessGroup(int rank, int size, ProcessGroupOptions options)
    : rank_(rank), size_(size), options_(options), job_rank_(rank), flight_(FlightRecorder::get()) {
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: rank ", rank,
             " is out of range for a group of ", size, " ranks");
  LOOM_CHECK(options.timeout.count() > 0, "ProcessGroup: the timeout must be positive, got ",
             options.timeout.count(), " ms");
}

namespace {

const char* name(OpKind kind) { return op_kind_name(kind); }

void check_rank(OpKind kind, const char* role, int peer, int size) {
  LOOM_CHECK(peer >= 0 && peer < size, name(kind), ": ", role, " ", peer,
             " is out of range for a group of ", size, " ranks");
}

void check_reducible(OpKind kind, const Tensor& t, ReduceOp op) {
  LOOM_CHECK(t.dtype() != kBool, name(kind), ": cannot reduce bool tensors (", reduce_op_name(op),
             "); convert to uint8 or int64 first");
  LOOM_CHECK(op != ReduceOp::Avg || is_floating(t.dtype()), name(kind),
             ": ReduceOp::Avg needs a floating-point tensor, got ", t.dtype(),
             " (use Sum and divide)");
}

// Whether the bytes of two tensors' storage overlap.
bool overlap(const Tensor& a, const Tensor& b) {
  if (a.storage() != b.storage() || a.numel() == 0 || b.numel() == 0) return false;
  auto begin = [](const Tensor& t) { return static_cast<const char*>(t.raw_data()); };
  auto end = [&](const Tensor& t) { return begin(t) + t.nbytes(); };
  return begin(a) < end(b) && begin(b) < end(a);
}

// Whether `piece` lies wholly inside `whole` (an in-place all_gather's input,
// an in-place reduce_scatter's output), by the descriptors' own definition;
// that it is the rank's own piece is checked once every rank's sizes are
// known (check_descriptors).
bool inside(const Tensor& piece, const Tensor& whole) { return offset_inside(piece, whole) >= 0; }

// Collectives write through raw pointers, not through ops: bump the version
// counter so that autograd notices a saved tensor that was overwritten.
void mark_written(const Tensor& t) { t.storage()->bump_version(); }

}  // namespace

void ProcessGroup::check_tensor(const char* what, const Tensor& t, const Tensor& like) const {
  LOOM_CHECK(t.defined(), what, " is undefined");
  LOOM_CHECK(supports(t.device()), what, " is on ", t.device(), ", but the ", backend(),
             " backend moves only tensors it can reach (CPU tensors for threads and mpi)");
  LOOM_CHECK(t.is_contiguous(), what, " must be contiguous (shape ", t.shape(), ", strides ",
             t.strides(), "); call .contiguous() and copy the result back");
  LOOM_CHECK(t.numel() <= INT_MAX, what, " has ", t.numel(),
             " elements; at most 2^31 - 1 per operation (MPI counts are int)");
  if (like.defined())
    LOOM_CHECK(t.dtype() == like.dtype(), what, " is ", t.dtype(), " but the input is ",
               like.dtype());
}

WorkPtr ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce: the tensor", tensor);
  check_reducible(OpKind::AllReduce, tensor, op);
  auto o = std::make_shared<Op>(OpKind::AllReduce);
  o->input = o->output = tensor;
  o->reduce = op;
  return issue(o);
}

WorkPtr ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_tensor("broadcast: the tensor", tensor);
  check_rank(OpKind::Broadcast, "root", root, size_);
  auto o = std::make_shared<Op>(OpKind::Broadcast);
  o->input = o->output = tensor;
  o->peer = root;
  return issue(o);
}

WorkPtr ProcessGroup::all_gather(const std::vector<Tensor>& outputs, const Tensor& input) {
  check_tensor("all_gather: the input", input);
  LOOM_CHECK(static_cast<int>(outputs.size()) == size_, "all_gather: expected one output per rank (",
             size_, "), got ", outputs.size());
  int64_t total = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_tensor(detail::concat("all_gather: outputs[", i, "]").c_str(), outputs[i], input);
    LOOM_CHECK(!overlap(outputs[i], input), "all_gather: outputs[", i,
               "] shares memory with the input");
    total += outputs[i].numel();
  }
  auto o = std::make_shared<Op>(OpKind::AllGather);
  o->input = input;
  // The backends gather into one buffer; finish() copies it into the list.
  o->output = empty({total}, input.options());
  o->outputs = outputs;
  return issue(o);
}

WorkPtr ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_tensor("all_gather: the input", input);
  check_tensor("all_gather: the output", output, input);
  LOOM_CHECK(!overlap(output, input) || inside(input, output),
             "all_gather: the input overlaps the output without lying inside it (in place, the input is this "
             "rank's piece of the output)");
  auto o = std::make_shared<Op>(OpKind::AllGather);
  o->input = input;
  o->output = output;
  return issue(o);
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_tensor("reduce_scatter: the input", input);
  check_tensor("reduce_scatter: the output", output, input);
  check_reducible(OpKind::ReduceScatter, input, op);
  LOOM_CHECK(!overlap(output, input) || inside(output, input),
             "reduce_scatter: the output overlaps the input without lying inside it (in place, the output is "
             "this rank's piece of the input)");
  auto o = std::make_shared<Op>(OpKind::ReduceScatter);
  o->input = input;
  o->output = output;
  o->reduce = op;
  return issue(o);
}

WorkPtr ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  return point_to_point(OpKind::Send, tensor, dst, tag);
}

WorkPtr ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  return point_to_point(OpKind::Recv, tensor, src, tag);
}

WorkPtr ProcessGroup::point_to_point(OpKind kind, const Tensor& tensor, int peer, int tag) {
  const bool send = kind == OpKind::Send;
  check_tensor(send ? "send: the tensor" : "recv: the tensor", tensor);
  check_rank(kind, send ? "dst" : "src", peer, size_);
  LOOM_CHECK(tag >= 0 && tag <= kMaxTag, op_kind_name(kind), ": tag ", tag, " is outside [0, ", kMaxTag, "]");
  auto o = std::make_shared<Op>(kind);
  o->input = o->output = tensor;
  o->peer = peer;
  o->tag = tag;
  return issue(o);
}

WorkPtr ProcessGroup::barrier() { return issue(std::make_shared<Op>(OpKind::Barrier)); }

WorkPtr ProcessGroup::issue(OpPtr op) {
  op->rank = rank_;
  op->group_size = size_;
  op->issued_at = std::chrono::steady_clock::now();
  if (op->kind != OpKind::Send && op->kind != OpKind::Barrier) mark_written(op->output);
  for (const Tensor& t : op->outputs) mark_written(t);
  WorkPtr work = op->work;
  std::lock_guard<std::mutex> lock(issue_mutex_);
  op->seq = is_p2p(op->kind) ? ++p2p_issued_ : ++collectives_issued_;
  if (flight_group_ < 0) flight_group_ = flight_.add_group({name_, backend(), size_, rank_, job_rank_, ""});
  op->flight_id = flight_.issued(flight_group_, *op);
  enqueue(std::move(op));
  return work;
}

void ProcessGroup::record_group() {
  std::lock_guard<std::mutex> lock(issue_mutex_);
  FlightGroup group{name_, backend(), size_, rank_, job_rank_, ""};
  if (flight_group_ < 0) {
    flight_group_ = flight_.add_group(std::move(group));
  } else {
    flight_.rename_group(flight_group_, std::move(group));
  }
}

void ProcessGroup::mark_started(const Op& op) { flight_.started(op.flight_id); }

void ProcessGroup::group_failed(const std::string& why) {
  if (!flight_.enabled()) return;
  flight_.group_failed(flight_group_, why);
  try {
    const std::string path = flight_.dump(detail::concat("the failure of group ", name_));
    std::fprintf(stderr, "loom: rank %d's flight record written to %s (tools/flight_record.py merges the ranks')\n",
                 job_rank_, path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: could not write rank %d's flight record: %s\n", job_rank_, e.what());
  }
}

void ProcessGroup::finish(Op& op, std::exception_ptr error) {
  if (!error) {
    try {
      int64_t offset = op.output.defined() ? op.output.storage_offset() : 0;
      for (const Tensor& out : op.outputs) {
        copy_data(as_strided(op.output, out.shape(), contiguous_strides(out.shape()), offset), out);
        offset += out.numel();
      }
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (!error) {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.ops += 1;
    stats_.bytes += op.payload_bytes();
    stats_.bus_bytes += op.bus_bytes();
  }
  if (!error) record_span(op);
  // Before the Work completes: a waiter that then writes the record sees it finished.
  if (!error) {
    flight_.completed(op.flight_id);
  } else if (op.flight_id != 0) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      flight_.failed(op.flight_id, e.what());
    } catch (...) {
      flight_.failed(op.flight_id, "an exception of an unknown type");
    }
  }
  // A completed operation lets go of its tensors before anyone can see it
  // complete, so the memory a waiter measures is its own (a failed one keeps
  // them: MPI may still be writing into an abandoned request's buffers).
  if (!error) op.release_tensors();
  op.work->mark_completed(error);
}

// The one place loom traces communication: each operation that succeeds is a
// span on its process's communication lane, from when it was issued to when
// it finished, so a trace shows it beside the compute it overlaps and the
// strategies carry no tracing of their own.
void ProcessGroup::record_span(const Op& op) const {
  if (!records_spans_ || !trace::enabled()) return;
  trace::record(op_kind_name(op.kind), "communication", trace::lane("rank" + std::to_string(job_rank_) + "/comm"),
                trace::to_us(op.issued_at), trace::now_us());
}

std::shared_ptr<ProcessGroup> ProcessGroup::split(int color, int key) {
  // Every rank learns every rank's (color, key): they all compute the same groups.
  Tensor mine = from_vector<int64_t>({color, key});
  Tensor all = empty({2 * static_cast<int64_t>(size_)}, {.dtype = kInt64});
  all_gather(all, mine)->wait();  // also: everything issued before has finished
  const int64_t id = splits_++;
  std::vector<int> members;  // the ranks with this color, by (key, rank)
  int new_rank = -1;
  if (color >= 0) {
    const int64_t* v = all.data_ptr<int64_t>();
    std::vector<std::pair<int64_t, int>> order;
    for (int r = 0; r < size_; ++r)
      if (v[2 * r] == color) order.emplace_back(v[2 * r + 1], r);
    std::sort(order.begin(), order.end());
    for (const auto& [k, r] : order) members.push_back(r);
    new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  }
  // Every rank takes part (MPI's split is a collective of the whole group).
  std::shared_ptr<ProcessGroup> group = make_subgroup(color, members, new_rank, id * (int64_t{1} << 20) + std::max(color, 0));
  if (group) {
    group->job_rank_ = job_rank_;
    group->name_ = detail::concat(name_, "/split", id, ".color", color);
    group->record_group();
  }
  return group;
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>& ranks) {
  std::vector<bool> seen(size_, false);
  for (int r : ranks) {
    LOOM_CHECK(r >= 0 && r < size_ && !seen[r], "new_group: rank ", r, " is out of range for a group of ", size_,
               " ranks, or listed twice");
    seen[r] = true;
  }
  const auto at = std::find(ranks.begin(), ranks.end(), rank_);
  if (at == ranks.end()) return split(-1);
  return split(0, static_cast<int>(at - ranks.begin()));
}

CommStats ProcessGroup::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

}  // namespace loom::parallel
