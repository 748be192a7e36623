#include "parallel/data_parallel.h"

#include "autograd/engine.h"
#include "parallel/trace.h"
#include "tensor/device_queue.h"

namespace loom::parallel {

DataParallelImpl::DataParallelImpl(nn::ModulePtr module, std::vector<Device> devices)
    : Module("DataParallel"), module_(std::move(module)), devices_(std::move(devices)) {
  LOOM_CHECK(module_ != nullptr, "DataParallel: the module is null");
  LOOM_CHECK(!devices_.empty(), "DataParallel: needs at least one device");
  module_->to(devices_[0]);
  register_module("module", module_);
  replicas_.push_back(module_);
  for (size_t i = 1; i < devices_.size(); ++i) replicas_.push_back(module_->clone(devices_[i]));
  for (const Device& d : devices_) queues_.emplace_back(d);
  workers_ = std::make_shared<WorkerPool>(static_cast<int>(devices_.size()));
}

// Runs task(r) on replica r's worker and queue, after what the calling thread
// has queued on that device, and orders the calling thread's queues after the
// replicas' work: replicas that share a GPU overlap, and every hand-over
// between this thread and a replica is ordered on the device.
void DataParallelImpl::run_replicas(int replicas, const std::function<void(int)>& task) {
  std::vector<DeviceMark> ready, done(replicas);
  for (int r = 0; r < replicas; ++r) ready.push_back(DeviceMark::here(devices_[r]));
  workers_->run(
      [&](int r) {
        DeviceQueue::Scope own_queue(queues_[r]);
        ready[r].wait_here();
        task(r);
        done[r] = DeviceMark::here(devices_[r]);
      },
      replicas);
  for (int r = 0; r < replicas; ++r) done[r].wait_here();
}

// Trace lanes: the main thread (broadcast, reduce) and one per replica. Looked
// up only when tracing is on, so that a Span stays one atomic load when off.
static int main_lane() { return trace::enabled() ? trace::lane("dp main") : 0; }
static int replica_lane(int r) { return trace::enabled() ? trace::lane("dp replica " + std::to_string(r)) : 0; }

void DataParallelImpl::broadcast_to_replicas() {
  trace::Span span("broadcast parameters", "communication", main_lane(), devices_[0]);
  NoGradGuard no_grad;
  const TensorList params = module_->parameters(), buffers = module_->buffers();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    const TensorList rp = replicas_[r]->parameters(), rb = replicas_[r]->buffers();
    for (size_t k = 0; k < params.size(); ++k) rp[k].copy_(params[k]);
    for (size_t k = 0; k < buffers.size(); ++k) rb[k].copy_(buffers[k]);
    replicas_[r]->train(module_->is_training());
  }
}

void DataParallelImpl::reduce_gradients_to_module(int replicas) {
  trace::Span span("reduce gradients", "communication", main_lane(), devices_[0]);
  NoGradGuard no_grad;
  const TensorList params = module_->parameters();
  for (int r = 1; r < replicas; ++r) {
    const TensorList rp = replicas_[r]->parameters();
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor g = rp[k].grad();
      if (!g.defined()) continue;
      used_here(g);  // made on the replica's queue, read here before it is dropped
      autograd::accumulate_grad(params[k], g.to(params[k].device()));
      rp[k].set_grad(Tensor());
    }
  }
}

Tensor DataParallelImpl::forward(const Tensor& x) {
  LOOM_CHECK(x.defined() && x.dim() >= 1, "DataParallel: expected a batched input, got ",
             x.defined() ? x.shape() : Shape{});
  // As PyTorch: a batch smaller than the device count uses fewer replicas.
  const int replicas = static_cast<int>(std::min<int64_t>(devices_.size(), x.size(0)));
  if (replicas <= 1) return module_->forward(x.to(devices_[0]));

  broadcast_to_replicas();
  // Each replica gets a detached chunk: its graph ends there, and the gather's
  // backward hands the chunk gradients back to x.
  TensorList chunks = chunk(x.detach(), replicas, 0);
  std::vector<int64_t> sizes;
  TensorList inputs;
  for (int r = 0; r < replicas; ++r) {
    sizes.push_back(chunks[r].size(0));
    Tensor in = chunks[r].to(devices_[r]);
    if (x.requires_grad()) in = contiguous_copy(in).requires_grad_();
    inputs.push_back(in);
  }
  TensorList outputs(replicas);
  run_replicas(replicas, [&](int r) {
    trace::Span span("forward", "compute", replica_lane(r), devices_[r]);
    used_here(inputs[r]);
    outputs[r] = replicas_[r]->forward(inputs[r]);
  });

  TensorList gathered;
  bool any_grad = false;
  for (int r = 0; r < replicas; ++r) {
    used_here(outputs[r]);
    gathered.push_back(outputs[r].detach().to(devices_[0]));
    any_grad |= outputs[r].requires_grad();
  }
  Tensor y = cat(gathered, 0);
  if (!autograd::grad_enabled() || !any_grad) return y;

  auto self = std::static_pointer_cast<DataParallelImpl>(shared_from_this());
  autograd::record("DataParallelGatherBackward", {x}, TensorList{y},
                   [self, outputs, inputs, sizes, replicas, x_device = x.device()](const TensorList& g) {
                     TensorList parts = split(g[0], sizes, 0);
                     for (int r = 0; r < replicas; ++r) parts[r] = parts[r].to(self->devices_[r]);
                     // Every replica backpropagates its part in its own thread...
                     self->run_replicas(replicas, [&](int r) {
                       trace::Span span("backward", "compute", replica_lane(r), self->devices_[r]);
                       used_here(parts[r]);
                       if (outputs[r].requires_grad()) autograd::backward({outputs[r]}, {parts[r]});
                     });
                     // ...then the first device adds the replicas' gradients to its own.
                     self->reduce_gradients_to_module(replicas);
                     if (!inputs[0].requires_grad()) return TensorList{Tensor()};
                     TensorList dx;
                     for (int r = 0; r < replicas; ++r) {
                       Tensor gr = inputs[r].grad();
                       used_here(gr);
                       dx.push_back(gr.defined() ? gr.to(x_device) : zeros(inputs[r].shape(), {.dtype = inputs[r].dtype(), .device = x_device}));
                     }
                     return TensorList{cat(dx, 0)};
                   });
  return y;
}

}  // namespace loom::parallel
