#include "tensor/cuda/graph.h"

#include <exception>
#include <string>

#include "tensor/creation.h"
#include "tensor/cuda/caching_allocator.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/cuda_check.h"
#include "tensor/cuda/device.h"
#include "tensor/host_waits.h"

namespace loom::cuda {
namespace {

__global__ void write_generator_state(uint64_t* state, uint64_t seed, uint64_t origin) {
  state[0] = seed;
  state[1] = origin;
}

}  // namespace

CudaGraph::CudaGraph(int device)
    : device_(device), stream_(Stream::dedicated(device)), last_replay_stream_(current_stream(device)) {}

CudaGraph::~CudaGraph() {
  // The kept blocks are free for others once the replays queued so far are done.
  if (!kept_.empty()) release_after_replays(device_, kept_, last_replay_stream_);
  DeviceGuard on_device(device_, std::nothrow);
  // A launch still running finishes first: CUDA defers the executable's destruction.
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  cudaGetLastError();
}

void CudaGraph::capture(const std::function<void()>& work) {
  DeviceGuard on_device(device_);
  const Stream caller = current_stream(device_);
  begin_capture(device_, stream_);
  cudaError_t ended = cudaSuccess;
  try {
    StreamGuard on_capture_stream(stream_);
    HostWaitsForbidden no_waits("capturing a CUDA graph on cuda:" + std::to_string(device_));
    DrawCapture draws(*this);
    // Thread-local mode: a "potentially unsafe" call (one that would wait)
    // by this thread invalidates the capture; other threads go on as usual.
    CUDA_CHECK(cudaStreamBeginCapture(stream_.handle(), cudaStreamCaptureModeThreadLocal));
    try {
      work();
    } catch (...) {
      cudaGraph_t partial = nullptr;
      cudaStreamEndCapture(stream_.handle(), &partial);
      if (partial != nullptr) cudaGraphDestroy(partial);
      cudaGetLastError();
      throw;
    }
    ended = cudaStreamEndCapture(stream_.handle(), &graph_);
  } catch (...) {
    discard_capture();
    throw;
  }
  kept_ = end_capture(device_);
  last_replay_stream_ = caller;
  if (ended != cudaSuccess) {
    cudaGetLastError();
    discard_capture();
    LOOM_FAIL("DeviceGraph::capture: CUDA could not capture the work on cuda:", device_, ": ",
              cudaGetErrorString(ended), ". Something in the captured function used a stream other than the "
              "thread's current one without an event from it, or made a call CUDA cannot capture");
  }
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
}

// After a failed capture: nothing recorded stays, and what the capture
// allocated or kept goes back (nothing of it ever ran).
void CudaGraph::discard_capture() {
  std::vector<void*> kept = end_capture(device_);
  kept.insert(kept.end(), kept_.begin(), kept_.end());
  kept_.clear();
  generators_.clear();
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  graph_ = nullptr;
  release_after_replays(device_, kept, current_stream(device_));
}

Draw CudaGraph::take(Generator& generator) {
  GeneratorUse* use = nullptr;
  for (GeneratorUse& g : generators_)
    if (g.generator == &generator) use = &g;
  if (use == nullptr) {
    // From the private pool (the capture stream is current): the graph's own.
    generators_.push_back({&generator, empty({2}, {.dtype = kInt64, .device = Device::cuda(device_)}), 0});
    use = &generators_.back();
  }
  Draw d;
  d.offset = use->draws++;
  d.device_state = static_cast<const uint64_t*>(use->state.raw_data());
  return d;
}

void CudaGraph::replay() {
  LOOM_CHECK(exec_ != nullptr, "DeviceGraph::replay: the graph has not been captured");
  DeviceGuard on_device(device_);
  const Stream stream = current_stream(device_);
  for (GeneratorUse& use : generators_) {
    // The offsets an uncaptured step would take now, and the seed it would use.
    const uint64_t origin = use.generator->reserve(use.draws);
    write_generator_state<<<1, 1, 0, stream.handle()>>>(static_cast<uint64_t*>(use.state.raw_data()),
                                                        use.generator->seed(), origin);
    CUDA_CHECK(cudaGetLastError());
  }
  CUDA_CHECK(cudaGraphLaunch(exec_, stream.handle()));
  last_replay_stream_ = stream;
}

std::shared_ptr<Backend::QueueObject> CudaBackend::capture_graph(int device_index, const std::function<void()>& work) {
  auto graph = std::make_shared<CudaGraph>(device_index);
  graph->capture(work);
  return graph;
}

void CudaBackend::replay_graph(QueueObject& graph) { static_cast<CudaGraph&>(graph).replay(); }

}  // namespace loom::cuda
