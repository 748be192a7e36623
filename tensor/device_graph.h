// A device's work captured once and replayed: CUDA graphs, as PyTorch's
// torch.cuda.CUDAGraph.
//
// A small model's training step on a GPU is bound by its launches, not by
// its arithmetic: the Fashion-MNIST CNN's step is a hundred-odd kernels of a
// few microseconds each, and the host spends about as long queueing each one.
// A captured step is one launch: the host code runs once, at capture, and
// every replay runs the recorded kernels with their recorded arguments.
//
//   Tensor x = empty({256, 1, 28, 28}, {.device = dev});    // static inputs
//   Tensor y = empty({256}, {.dtype = kInt64, .device = dev});
//   for (int i = 0; i < 3; ++i) step(x, y);                 // warm-up, outside
//   DeviceGraph graph(dev);
//   Tensor loss;
//   graph.capture([&] { loss = step(x, y); });              // records, runs nothing
//   for (auto& [images, labels] : loader.epoch(e)) {
//     x.copy_(images);
//     y.copy_(labels);
//     graph.replay();                                       // the whole step
//   }
//   double last = loss.item();                              // the last replay's loss
//
// What a captured function must respect (the capture checks what it can):
// - Static tensors. Every replay reads and writes the memory the capture
//   used: copy new data into the same input tensors, and read outputs from
//   the tensors the capture produced, after replay().
// - No host waits inside. item(), a copy to the host, synchronize(): the
//   work has not run yet at capture, so each is a loom::Error that names it.
//   A copy from the host into a device tensor is refused too (its source
//   would be read at capture only): copy before replay().
// - Host code runs once. A value the host computes inside (a branch, a
//   learning rate, Adam's step count) is fixed at capture. The optimizers
//   and GradScaler keep what changes from step to step on the device while
//   they are captured (optim/optimizer.h), and refuse state that does not
//   exist yet: take a warm-up step outside the capture first, which also
//   lets cuDNN choose its algorithms.
// - Random numbers are new at each replay: the ones an uncaptured step at
//   that point would draw (a Philox offset origin written before each
//   replay; the generators used must outlive the graph).
// - Memory. What the capture allocates comes from a pool private to the
//   graph, which every replay reuses; tensors released during the capture
//   that the graph still uses are kept until the graph is destroyed. A
//   destroyed graph's pool stays cached until empty_cache().
// - One thread, one queue. The capture records the calling thread's current
//   queue; work it hands to other threads or queues is not captured.
#pragma once

#include <functional>
#include <memory>

#include "tensor/backend.h"

namespace loom {

class DeviceGraph {
 public:
  explicit DeviceGraph(Device device);
  Device device() const { return device_; }

  // Runs `work` once with the device's work recorded instead of run; host
  // code in it runs now. Throws (and records nothing) if `work` throws or
  // does something a capture cannot hold. Once per graph.
  void capture(const std::function<void()>& work);
  // Runs the captured work on the calling thread's current queue, without
  // waiting for it.
  void replay();
  bool captured() const { return graph_ != nullptr; }

 private:
  Device device_;
  std::shared_ptr<Backend::QueueObject> graph_;
};

// Whether the calling thread is inside DeviceGraph::capture: code whose host
// side must not be frozen into a graph (an optimizer's step count) asks.
bool capturing_device_graph();

}  // namespace loom
