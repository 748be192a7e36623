// host_staging.h with CUDA: one staging stream per GPU (from loom's stream
// pool), events to order it against the streams that produce and consume the
// tensors, pinned host memory so that the copies back run asynchronously.
#include "parallel/comm/host_staging.h"

#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"

namespace loom::parallel::staging {

struct ReadyMark {
  int device = -1;
  cuda::Event event;
};

namespace {

cuda::Stream staging_stream(int device) { return cuda::Stream::for_purpose(device, "host staging"); }

}  // namespace

std::shared_ptr<ReadyMark> mark_ready(int device, const std::vector<Tensor>& tensors) {
  auto mark = std::make_shared<ReadyMark>();
  mark->device = device;
  mark->event.record(cuda::current_stream(device));
  const cuda::Stream staging = staging_stream(device);
  for (const Tensor& t : tensors) cuda::record_stream(t, staging);
  return mark;
}

void copy_to_host(const ReadyMark& ready, const Tensor& tensor, const Tensor& host) {
  const cuda::Stream staging = staging_stream(ready.device);
  cuda::StreamGuard on_staging(staging);
  ready.event.wait(staging);
  copy_data(tensor, host);  // device to host waits for the staging stream: the host copy is complete
}

Tensor host_like(const Tensor& like) { return empty_pinned(like.shape(), {.dtype = like.dtype()}); }

Tensor to_host(const ReadyMark& ready, const Tensor& tensor) {
  Tensor host = host_like(tensor);
  copy_to_host(ready, tensor, host);
  return host;
}

std::function<void()> copy_to_device(const ReadyMark& ready,
                                     const std::vector<std::pair<Tensor, Tensor>>& host_to_device) {
  const int device = ready.device;
  const cuda::Stream staging = staging_stream(device);
  auto done = std::make_shared<cuda::Event>();
  {
    cuda::StreamGuard on_staging(staging);
    // A receive has no input, so to_host never made the staging stream wait:
    // without this, its copy could overwrite the target while work the
    // caller queued before the receive still reads it, or before an earlier
    // write to it (a block just reused by the allocator) has run.
    ready.event.wait(staging);
    for (const auto& [host, target] : host_to_device) copy_data(host, target);
    done->record(staging);
  }
  return [done, device] { done->wait(cuda::current_stream(device)); };
}

}  // namespace loom::parallel::staging
