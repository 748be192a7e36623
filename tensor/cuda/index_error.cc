#include "tensor/cuda/index_error.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/stream.h"
#include "tensor/error.h"

namespace loom::cuda {
namespace {

struct Slots {
  std::vector<std::once_flag> once;
  std::vector<IndexErrorSlot> slot;
  // The host's view of each record, published once the slot is ready:
  // check_index_errors() reads it without taking the once_flag.
  std::unique_ptr<std::atomic<IndexErrorRecord*>[]> ready;
  std::mutex check_mutex;
};

Slots& slots() {
  static Slots* s = [] {
    auto* slots = new Slots();  // never destroyed
    const int n = device_count();
    slots->once = std::vector<std::once_flag>(n);
    slots->slot.resize(n, IndexErrorSlot{nullptr, nullptr});
    slots->ready = std::make_unique<std::atomic<IndexErrorRecord*>[]>(n);
    for (int i = 0; i < n; ++i) slots->ready[i].store(nullptr);
    return slots;
  }();
  return *s;
}

const char* op_name(int op) {
  switch (static_cast<IndexOpCode>(op)) {
    case IndexOpCode::IndexSelect: return "index_select";
    case IndexOpCode::IndexAdd: return "index_add";
    case IndexOpCode::Gather: return "gather";
    case IndexOpCode::ScatterAdd: return "scatter_add";
  }
  return "an indexing op";
}

}  // namespace

IndexErrorSlot index_error_slot(int device) {
  check_device(device);
  Slots& s = slots();
  std::call_once(s.once[device], [&] {
    DeviceGuard guard(device);
    IndexErrorSlot slot{};
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&slot.claim), sizeof(int)));
    CUDA_CHECK(cudaMemset(slot.claim, 0, sizeof(int)));
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, sizeof(IndexErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
    auto* record = static_cast<IndexErrorRecord*>(host);
    *record = IndexErrorRecord{0, 0, 0, 0, 0};
    void* device_view = nullptr;
    CUDA_CHECK(cudaHostGetDevicePointer(&device_view, host, 0));
    slot.record = static_cast<IndexErrorRecord*>(device_view);
    // The host reads through its own address of the same memory.
    s.slot[device] = IndexErrorSlot{slot.claim, record};
    // Kernels get the device address; with unified addressing both are equal.
    LOOM_INTERNAL_ASSERT(device_view == host, "mapped host memory has a different device address");
    CUDA_CHECK(cudaDeviceSynchronize());  // the memset is done before any kernel can use the slot
    s.ready[device].store(record, std::memory_order_release);
  });
  return s.slot[device];
}

void check_index_errors(int device) {
  if (device < 0 || device >= device_count()) return;
  Slots& s = slots();
  IndexErrorRecord* record = s.ready[device].load(std::memory_order_acquire);
  if (record == nullptr) return;  // no indexing kernel has run on this device
  if (*static_cast<volatile int*>(&record->set) == 0) return;
  std::lock_guard<std::mutex> lock(s.check_mutex);
  if (*static_cast<volatile int*>(&record->set) == 0) return;  // another thread reported it
  IndexErrorRecord seen = *record;
  // Clear for the next op: the record here, the claim word on the device.
  *static_cast<volatile int*>(&record->set) = 0;
  {
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device).handle();
    CUDA_CHECK(cudaMemsetAsync(s.slot[device].claim, 0, sizeof(int), stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  LOOM_FAIL(op_name(seen.op), ": index ", seen.index, " is out of range for dimension ", seen.dim,
            " of size ", seen.size, " (found by a CUDA kernel on cuda:", device,
            " and reported at the next synchronising call)");
}

}  // namespace loom::cuda
