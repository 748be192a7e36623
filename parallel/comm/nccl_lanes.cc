// NcclGroup's lanes (nccl_group_state.h): a communicator and a stream each,
// one transfer at a time; and the watchdog over transfers on the GPU.
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

void NcclGroup::State::queue_transfer(Lane& lane, std::shared_ptr<Transfer> t) {
  t->deadline = Clock::now() + timeout;
  lane.queue.push_back(std::move(t));
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


}  // namespace loom::parallel
