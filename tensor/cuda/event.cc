#include "tensor/cuda/event.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/index_error.h"
#include "tensor/error.h"
#include "tensor/host_waits.h"

namespace loom::cuda {

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);  // errors here cannot be reported
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)),
      device_(std::exchange(other.device_, -1)),
      timing_(other.timing_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    device_ = std::exchange(other.device_, -1);
    timing_ = other.timing_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  DeviceGuard guard(stream.device());
  if (event_ == nullptr) {
    CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = stream.device();
  }
  LOOM_CHECK(stream.device() == device_, "Event::record: the event belongs to cuda:", device_,
             " but the stream is on cuda:", stream.device());
  CUDA_CHECK(cudaEventRecord(event_, stream.handle()));
}

void Event::wait(const Stream& stream) const {
  if (event_ == nullptr) return;
  DeviceGuard guard(stream.device());
  CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), event_, 0));
}

void Event::synchronize() const {
  if (event_ == nullptr) return;
  note_host_wait("Event::synchronize()");
  CUDA_CHECK(cudaEventSynchronize(event_));
  check_index_errors(device_);
}

bool Event::query() const {
  if (event_ == nullptr) return true;
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  CUDA_CHECK(status);
  return false;
}

float Event::elapsed_time(const Event& end) const {
  LOOM_CHECK(timing_ && end.timing_,
             "Event::elapsed_time: both events need to be made with enable_timing = true");
  LOOM_CHECK(event_ != nullptr && end.event_ != nullptr,
             "Event::elapsed_time: both events must have been recorded");
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace loom::cuda
