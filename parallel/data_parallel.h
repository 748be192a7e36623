// DataParallel: one process, several devices (PyTorch's nn.DataParallel).
//
// Every forward:
//   1. broadcast  the module's parameters and buffers into each replica
//                 (replica 0 is the module itself, on the first device);
//   2. scatter    the batch along dim 0, one chunk per device;
//   3. apply      each replica runs forward in its own worker thread, with
//                 its own autograd tape;
//   4. gather     the outputs are concatenated on the first device.
// The gathered output's backward runs each replica's backward in its worker
// thread, then adds every replica's gradients into the module's parameters on
// the first device. So the first device does extra work — the gather, the
// loss, the reduction — which is DataParallel's known weakness, and why
// DistributedDataParallel exists.
//
// Devices may repeat (several replicas on one GPU or on the CPU), which makes
// DataParallel testable on any machine. On a GPU each replica works on a
// queue (stream) of its own, ordered against the first device's work by
// marks (tensor/device_queue.h), so replicas that share a GPU overlap.
//
//   parallel::DataParallel dp(model, {Device::cpu(), Device::cpu()});
//   Tensor loss = nn::functional::cross_entropy(dp->forward(x), y);
//   loss.backward();   // model's parameters hold the gradient of the whole batch
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "nn/module.h"
#include "parallel/worker_pool.h"
#include "tensor/device_queue.h"

namespace loom::parallel {

class DataParallelImpl : public nn::Module {
 public:
  // Moves `module` to devices[0] and makes one replica per further device.
  DataParallelImpl(nn::ModulePtr module, std::vector<Device> devices);

  Tensor forward(const Tensor& x) override;
  const nn::ModulePtr& module() const { return module_; }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  void broadcast_to_replicas();
  void reduce_gradients_to_module(int replicas);
  void run_replicas(int replicas, const std::function<void(int)>& task);

  nn::ModulePtr module_;
  std::vector<Device> devices_;
  std::vector<nn::ModulePtr> replicas_;  // replicas_[0] is module_
  std::vector<DeviceQueue> queues_;      // each replica's own queue on its device
  std::shared_ptr<WorkerPool> workers_;
};
// A handle, as for layers: DataParallel dp(model, {Device::cuda(0), Device::cuda(1)}).
class DataParallel : public nn::ModuleHolder<DataParallelImpl> {
 public:
  DataParallel(std::nullptr_t) : ModuleHolder(nullptr) {}
  DataParallel(std::shared_ptr<DataParallelImpl> impl) : ModuleHolder(std::move(impl)) {}
  // `module`: what the user holds (nn::Sequential, a ModulePtr, ...).
  DataParallel(nn::ModulePtr module, std::vector<Device> devices)
      : ModuleHolder(std::make_shared<DataParallelImpl>(std::move(module), std::move(devices))) {}
};

}  // namespace loom::parallel
