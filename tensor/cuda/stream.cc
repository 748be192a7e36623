#include "tensor/cuda/stream.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/cuda/index_error.h"
#include "tensor/error.h"
#include "tensor/host_waits.h"

namespace loom::cuda {
namespace {

constexpr int kPoolSize = 32;

struct DeviceStreams {
  std::once_flag default_once;
  std::once_flag pool_once;
  cudaStream_t default_stream = nullptr;
  cudaStream_t pool[kPoolSize] = {};
  std::atomic<uint32_t> next{0};
};

DeviceStreams& streams(int device) {
  check_device(device);
  // Never destroyed, and the streams are never destroyed either: kernels may
  // still be queued on them when static objects go away.
  static DeviceStreams* all = new DeviceStreams[device_count()];
  return all[device];
}

cudaStream_t create_stream(int device) {
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

// The calling thread's current stream per device; null means the default.
thread_local std::vector<cudaStream_t> current;

}  // namespace

Stream Stream::default_stream(int device) {
  DeviceStreams& d = streams(device);
  std::call_once(d.default_once, [&] { d.default_stream = create_stream(device); });
  return Stream(device, d.default_stream);
}

Stream Stream::from_pool(int device) {
  DeviceStreams& d = streams(device);
  std::call_once(d.pool_once, [&] {
    for (cudaStream_t& s : d.pool) s = create_stream(device);
  });
  return Stream(device, d.pool[d.next.fetch_add(1, std::memory_order_relaxed) % kPoolSize]);
}

Stream Stream::for_purpose(int device, const std::string& purpose) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, Stream>* kept = new std::map<std::pair<int, std::string>, Stream>();
  std::lock_guard<std::mutex> lock(mutex);
  auto it = kept->find({device, purpose});
  if (it == kept->end()) it = kept->emplace(std::make_pair(device, purpose), dedicated(device)).first;
  return it->second;
}

Stream Stream::dedicated(int device) { return Stream(device, create_stream(device)); }

void Stream::synchronize() const {
  note_host_wait("Stream::synchronize()");
  CUDA_CHECK(cudaStreamSynchronize(handle_));
  check_index_errors(device_);
}

bool Stream::query() const {
  cudaError_t status = cudaStreamQuery(handle_);
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not ready" is an answer, not an error
    return false;
  }
  CUDA_CHECK(status);
  return false;
}

Stream current_stream(int device) {
  if (device >= 0 && device < static_cast<int>(current.size()) && current[device] != nullptr)
    return Stream(device, current[device]);
  return Stream::default_stream(device);
}

void set_current_stream(const Stream& stream) {
  check_device(stream.device());
  if (static_cast<int>(current.size()) <= stream.device()) current.resize(device_count(), nullptr);
  current[stream.device()] = stream.handle();
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())) {
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  // Cannot fail: the device was checked when the guard was made.
  current[previous_.device()] = previous_.handle();
}

}  // namespace loom::cuda
