// device_copy.h with CUDA: one copy stream per GPU (from loom's stream pool),
// an event per batch to order the consumer's stream after its copy.
#include "data/device_copy.h"

#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"

namespace loom::data::device_copy {

struct InFlight {
  Batch batch;  // on the device
  int device = -1;
  cuda::Event copied;
};

namespace {

cuda::Stream copy_stream(int device) { return cuda::Stream::for_purpose(device, "batch copies"); }

Tensor pinned(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || is_pinned(t)) return t;
  Tensor out = empty_pinned(t.shape(), {.dtype = t.dtype()});
  copy_data(t, out);
  return out;
}

}  // namespace

Batch pin(Batch batch) { return {pinned(batch.input), pinned(batch.target)}; }

std::shared_ptr<InFlight> start(Batch batch, Device device) {
  auto copy = std::make_shared<InFlight>();
  copy->device = device.index();
  const cuda::Stream stream = copy_stream(copy->device);
  cuda::StreamGuard on_copy_stream(stream);  // allocations and copies below go on the copy stream
  copy->batch = {batch.input.to(device), batch.target.to(device)};
  copy->copied.record(stream);
  return copy;
}

Batch finish(const InFlight& copy) {
  const cuda::Stream consumer = cuda::current_stream(copy.device);
  copy.copied.wait(consumer);
  // The memory belongs to the copy stream; the consumer's stream uses it too.
  cuda::record_stream(copy.batch.input, consumer);
  cuda::record_stream(copy.batch.target, consumer);
  return copy.batch;
}

}  // namespace loom::data::device_copy
