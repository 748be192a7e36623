#include "tensor/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/event.h"
#include "tensor/cuda/stream.h"
#include "tensor/cuda/index_error.h"
#include "tensor/cuda/pinned_allocator.h"
#include "tensor/host_waits.h"

namespace loom::cuda {

Allocator& CudaBackend::allocator(int device_index) { return device_allocator(device_index); }

int CudaBackend::device_count() { return cuda::device_count(); }

void CudaBackend::synchronize(int device_index) {
  DeviceGuard guard(device_index);
  note_host_wait("synchronize()");
  CUDA_CHECK(cudaDeviceSynchronize());
  check_index_errors(device_index);
}

Allocator* CudaBackend::pinned_host_allocator() { return &pinned_allocator(); }

// ---- queues: streams, and events between them ----

namespace {

struct StreamObject : Backend::QueueObject {
  explicit StreamObject(Stream s) : stream(s) {}
  Stream stream;
};

struct ScopeObject : Backend::QueueObject {
  explicit ScopeObject(const Stream& s) : guard(s) {}
  StreamGuard guard;
};

struct MarkObject : Backend::QueueObject {
  explicit MarkObject(bool timed) : event(timed) {}
  Event event;
};

}  // namespace

std::shared_ptr<Backend::QueueObject> CudaBackend::new_queue(int device_index) {
  return std::make_shared<StreamObject>(Stream::from_pool(device_index));
}

std::shared_ptr<Backend::QueueObject> CudaBackend::enter_queue(const QueueObject& queue) {
  return std::make_shared<ScopeObject>(static_cast<const StreamObject&>(queue).stream);
}

std::shared_ptr<Backend::QueueObject> CudaBackend::mark_queue(int device_index, bool timed) {
  auto mark = std::make_shared<MarkObject>(timed);
  mark->event.record(current_stream(device_index));
  return mark;
}

double CudaBackend::seconds_between(const QueueObject& from, const QueueObject& to) {
  const Event& start = static_cast<const MarkObject&>(from).event;
  const Event& end = static_cast<const MarkObject&>(to).event;
  // The marks may be on different streams (a trace's anchor and a span), so
  // `end` done does not mean `start` done, and cudaEventElapsedTime fails
  // (not ready) while either is pending.
  start.synchronize();
  end.synchronize();
  return start.elapsed_time(end) * 1e-3;
}

void CudaBackend::wait_for_mark(const QueueObject& mark, int device_index) {
  static_cast<const MarkObject&>(mark).event.wait(current_stream(device_index));
}

void CudaBackend::used_on_current_queue(const Tensor& t) { record_stream(t, current_stream(t.device().index())); }

namespace {

// Linked in only when Bazel builds with CUDA (the library is alwayslink), so
// no code outside the backend knows whether CUDA is there. Registering
// touches no CUDA API: a machine without a GPU loads this fine.
struct Registration {
  Registration() {
    static CudaBackend backend;
    register_backend(DeviceType::CUDA, &backend);
  }
};

const Registration registration;

}  // namespace
}  // namespace loom::cuda
