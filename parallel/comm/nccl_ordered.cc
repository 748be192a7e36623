// NcclGroup's issue-ordered operations (nccl_group_state.h): collectives,
// barriers and CPU tensors, one at a time, after a descriptor exchange.
#include "parallel/comm/nccl_group_state.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "parallel/comm/descriptor.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"

namespace loom::parallel {

using namespace nccl;

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
      group->mark_started(*o.op);
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


}  // namespace loom::parallel
