#include "tensor/device_graph.h"

namespace loom {
namespace {

thread_local bool t_capturing = false;

// Sets t_capturing for a scope, also when the capture throws.
class CapturingScope {
 public:
  CapturingScope() { t_capturing = true; }
  ~CapturingScope() { t_capturing = false; }
  CapturingScope(const CapturingScope&) = delete;
  CapturingScope& operator=(const CapturingScope&) = delete;
};

}  // namespace

DeviceGraph::DeviceGraph(Device device) : device_(device) {
  LOOM_CHECK(device.is_cuda(), "DeviceGraph: graphs need a CUDA device, got ", device,
             "; the CPU runs each op when it is called, so there is no launch to save");
}

void DeviceGraph::capture(const std::function<void()>& work) {
  LOOM_CHECK(!captured(), "DeviceGraph::capture: this graph was captured already; make a new one");
  LOOM_CHECK(!t_capturing, "DeviceGraph::capture: this thread is capturing a graph already; captures do not nest");
  CapturingScope scope;
  graph_ = backend_for(device_).capture_graph(device_.index(), work);
}

void DeviceGraph::replay() {
  LOOM_CHECK(captured(), "DeviceGraph::replay: nothing captured yet; call capture() first");
  backend_for(device_).replay_graph(*graph_);
}

bool capturing_device_graph() { return t_capturing; }

}  // namespace loom
