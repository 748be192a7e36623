#include "parallel/comm/host_staged_group.h"

#include "parallel/comm/descriptor.h"
#include "parallel/comm/host_staging.h"
#include "tensor/error.h"

namespace loom::parallel {

struct HostStagedGroup::Staged {
  OpPtr op;
  int device = -1;  // the GPU of its CUDA tensors; -1: a CPU operation, passed through
  std::shared_ptr<staging::ReadyMark> ready;
  Tensor host_input, host_output;  // what the inner operation runs on
  std::vector<Tensor> host_outputs;  // an all_gather into a list
  WorkPtr inner;
  std::exception_ptr error;
};

namespace {

// The tensors of an operation, and the one GPU they are on (-1: none).
std::vector<Tensor> tensors_of(const Op& op) {
  std::vector<Tensor> all;
  for (const Tensor& t : {op.input, op.output})
    if (t.defined()) all.push_back(t);
  for (const Tensor& t : op.outputs) all.push_back(t);
  return all;
}

int device_of(const Op& op) {
  int device = -1;
  for (const Tensor& t : tensors_of(op)) {
    if (!t.device().is_cuda()) continue;
    LOOM_CHECK(device == -1 || device == t.device().index(), op.where(), ": tensors on cuda:", device, " and ",
               t.device(), "; one operation takes one device");
    device = t.device().index();
  }
  if (device >= 0)
    for (const Tensor& t : tensors_of(op))
      LOOM_CHECK(t.device().is_cuda(), op.where(), ": tensors on cuda:", device, " and ", t.device(),
                 "; one operation takes one device");
  return device;
}

bool writes_output(OpKind kind) { return kind != OpKind::Send && kind != OpKind::Barrier; }

// Where an in-place all_gather's input (reduce_scatter's output) starts in
// its whole, in elements, as the inner group reads it; -1 when not in place.
int64_t in_place_at(const Op& op) {
  if (op.kind != OpKind::AllGather && op.kind != OpKind::ReduceScatter) return -1;
  return make_descriptor(op).in_place_at;
}

// The same operation on other tensors, issued to `group`.
WorkPtr reissue(ProcessGroup& group, const Op& op, const Tensor& input, const Tensor& output,
                const std::vector<Tensor>& outputs) {
  switch (op.kind) {
    case OpKind::AllReduce: return group.all_reduce(input, op.reduce);
    case OpKind::Broadcast: return group.broadcast(input, op.peer);
    case OpKind::AllGather: return outputs.empty() ? group.all_gather(output, input) : group.all_gather(outputs, input);
    case OpKind::ReduceScatter: return group.reduce_scatter(output, input, op.reduce);
    case OpKind::Barrier: return group.barrier();
    case OpKind::Send: return group.send(input, op.peer, op.tag);
    case OpKind::Recv: return group.recv(output, op.peer, op.tag);
  }
  LOOM_FAIL("HostStagedGroup: unknown operation");
}

}  // namespace

std::shared_ptr<ProcessGroup> HostStagedGroup::wrap(std::shared_ptr<ProcessGroup> inner) {
  LOOM_CHECK(inner != nullptr, "HostStagedGroup::wrap: no group to wrap");
  return std::shared_ptr<ProcessGroup>(new HostStagedGroup(std::move(inner)));
}

HostStagedGroup::HostStagedGroup(std::shared_ptr<ProcessGroup> inner)
    : ProcessGroup(inner->rank(), inner->size(), inner->options()), inner_(std::move(inner)) {
  record_no_spans();  // the inner group records the transfer itself
  derive_from(*inner_, "+host-staging");
  record_group();
  issuer_ = std::thread([this] { issue_loop(); });
  completer_ = std::thread([this] { complete_loop(to_complete_); });
  send_completer_ = std::thread([this] { complete_loop(sends_to_complete_); });
}

HostStagedGroup::~HostStagedGroup() {
  to_issue_.close();
  issuer_.join();
  to_complete_.close();
  sends_to_complete_.close();
  completer_.join();
  send_completer_.join();
}

// The inner group's subgroup, staged the same way.
std::shared_ptr<ProcessGroup> HostStagedGroup::make_subgroup(int color, const std::vector<int>&, int new_rank,
                                                             int64_t) {
  std::shared_ptr<ProcessGroup> inner = inner_->split(color, new_rank);
  return inner ? wrap(std::move(inner)) : nullptr;
}

void HostStagedGroup::enqueue(OpPtr op) {
  auto s = std::make_shared<Staged>();
  s->op = std::move(op);
  try {
    s->device = device_of(*s->op);
    if (s->device >= 0) s->ready = staging::mark_ready(s->device, tensors_of(*s->op));
  } catch (...) {
    s->error = std::current_exception();  // reported by its Work, in order
  }
  to_issue_.push(std::move(s));
}

void HostStagedGroup::issue_loop() {
  while (std::shared_ptr<Staged> s = to_issue_.pop()) {
    const Op& op = *s->op;
    mark_started(op);  // waiting for the caller's stream, then the inner group
    if (!s->error) {
      try {
        if (s->device < 0) {
          s->host_input = op.input;
          s->host_output = op.output;
          s->host_outputs = op.outputs;
        } else if (const int64_t at = in_place_at(op); at >= 0) {
          // In place: the host piece is a view of the host whole at the same
          // place, so that the inner group sees (and checks) where it lies.
          const bool gather = op.kind == OpKind::AllGather;
          const Tensor& piece = gather ? op.input : op.output;
          Tensor whole = gather ? staging::host_like(op.output) : staging::to_host(*s->ready, op.input);
          Tensor host_piece = whole.flatten().narrow(0, at, piece.numel()).view(piece.shape().vec());
          if (gather) staging::copy_to_host(*s->ready, piece, host_piece);  // straight into its place
          s->host_input = gather ? host_piece : whole;
          s->host_output = gather ? whole : host_piece;
        } else {
          for (const Tensor& out : op.outputs) s->host_outputs.push_back(staging::host_like(out));
          const bool shared = op.input.defined() && op.input.is_same(op.output);
          if (op.input.defined() && op.kind != OpKind::Recv) s->host_input = staging::to_host(*s->ready, op.input);
          if (shared)
            s->host_output = op.kind == OpKind::Recv ? staging::host_like(op.output) : s->host_input;
          else if (op.output.defined() && op.outputs.empty())  // a list's flat buffer goes unused
            s->host_output = staging::host_like(op.output);
          if (op.kind == OpKind::Recv) s->host_input = s->host_output;
        }
        s->inner = reissue(*inner_, op, s->host_input, s->host_output, s->host_outputs);
      } catch (...) {
        s->error = std::current_exception();
      }
    }
    // A send waits only for its own message (a large one, for its receiver).
    (s->op->kind == OpKind::Send ? sends_to_complete_ : to_complete_).push(std::move(s));
  }
}

void HostStagedGroup::complete_loop(FifoQueue<std::shared_ptr<Staged>>& queue) {
  while (std::shared_ptr<Staged> s = queue.pop()) {
    Op& op = *s->op;
    std::exception_ptr error = s->error;
    if (!error) {
      try {
        s->inner->wait();
        if (s->device >= 0 && writes_output(op.kind)) {
          std::vector<std::pair<Tensor, Tensor>> back;
          if (op.outputs.empty()) back.emplace_back(s->host_output, op.output);
          for (size_t i = 0; i < op.outputs.size(); ++i) back.emplace_back(s->host_outputs[i], op.outputs[i]);
          op.work->set_device_ordering(staging::copy_to_device(*s->ready, back));
        }
        // The inner group filled an all_gather's list itself: finish() has nothing to copy.
        op.outputs.clear();
      } catch (...) {
        error = std::current_exception();
      }
    }
    finish(op, error);
  }
}

}  // namespace loom::parallel
