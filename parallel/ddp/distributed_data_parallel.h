// DistributedDataParallel: one process (rank) per device, each with a full
// copy of the model and its own share of every batch (PyTorch's
// nn.parallel.DistributedDataParallel).
//
//   auto pg = parallel::init(argc, argv);               // mpirun -np 4 ./train
//   parallel::DistributedDataParallel ddp(model, pg);   // rank 0's weights everywhere
//   optim::Adam opt(ddp->parameters(), {.lr = 1e-3});
//   for (auto& [x, y] : loader) {                       // a DistributedSampler shards the data
//     opt.zero_grad();
//     F::cross_entropy(ddp->forward(x), y).backward();  // gradients averaged over ranks
//     opt.step();                                       // identical on every rank
//   }
//
// What happens, and where:
//   construction  all ranks check they hold the same parameter shapes, then
//                 take rank 0's parameters and buffers (broadcast);
//   forward       rank 0's buffers (BatchNorm statistics) are broadcast first
//                 (options.broadcast_buffers), then the module runs locally;
//   backward      the Reducer (reducer.h) averages gradients bucket by bucket,
//                 overlapping communication with the rest of backward (in
//                 16 bits with register_comm_hook(compress_hook(...))).
// Since every rank starts from the same weights and applies the same averaged
// gradient, the replicas never drift apart: no parameter is ever broadcast
// again. That is the whole difference from DataParallel, which re-broadcasts
// every step from one master device.
//
// Gradient accumulation: backward inside `auto guard = ddp->no_sync();`
// accumulates locally without communicating; the first backward after the
// guard is gone averages the accumulated sums.
#pragma once

#include <cstdint>
#include <memory>

#include "nn/module.h"
#include "parallel/comm/process_group.h"
#include "parallel/ddp/reducer.h"

namespace loom::parallel {

struct DDPOptions {
  // The most gradient bytes one all-reduce carries (PyTorch's bucket_cap_mb = 25).
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  // Broadcast rank 0's buffers before each forward, so that every rank
  // normalises with the same running statistics in eval mode.
  bool broadcast_buffers = true;
  // Allow parameters that get no gradient in a backward (branches not taken):
  // they count as zero on this rank. Off, such a backward is an error naming them.
  bool find_unused_parameters = false;
  // Make each parameter's .grad() a view into its bucket after its first
  // gradient (PyTorch's gradient_as_bucket_view): the averaged gradients are
  // then already in place, saving the copy back after every backward and the
  // memory of a second copy of all gradients. .grad() then shares memory with
  // the bucket: code that keeps a gradient across steps must clone it.
  bool gradient_as_bucket_view = false;
};

class DistributedDataParallelImpl : public nn::Module {
 public:
  DistributedDataParallelImpl(nn::ModulePtr module, std::shared_ptr<ProcessGroup> group, DDPOptions options = {});

  Tensor forward(const Tensor& x) override;

  // While alive, backward passes accumulate gradients without communicating.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelImpl& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = previous_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallelImpl& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Replaces how gradient buckets are averaged, e.g. by
  // compress_hook(kBFloat16); every rank registers the same kind of hook.
  void register_comm_hook(std::shared_ptr<CommHook> hook) { reducer_->set_comm_hook(std::move(hook)); }

  const nn::ModulePtr& module() const { return module_; }
  ProcessGroup& process_group() const { return *group_; }
  const Reducer& reducer() const { return *reducer_; }

 private:
  void check_same_parameters_on_all_ranks();
  void broadcast_from_rank0(const TensorList& tensors);

  nn::ModulePtr module_;
  std::shared_ptr<ProcessGroup> group_;
  DDPOptions options_;
  TensorList buffers_;  // the module's, in registration order
  std::shared_ptr<Reducer> reducer_;
  bool sync_ = true;
};

// No inherited constructors: ModuleHolder's forwarding one would outbid the
// overload taking a layer handle (a Sequential, a Linear).
class DistributedDataParallel : public nn::ModuleHolder<DistributedDataParallelImpl> {
 public:
  DistributedDataParallel(std::nullptr_t) : ModuleHolder(nullptr) {}
  DistributedDataParallel(std::shared_ptr<DistributedDataParallelImpl> impl) : ModuleHolder(std::move(impl)) {}
  // `module`: what the user holds (nn::Sequential, a ModulePtr, ...).
  DistributedDataParallel(nn::ModulePtr module, std::shared_ptr<ProcessGroup> group, DDPOptions options = {})
      : ModuleHolder(std::make_shared<DistributedDataParallelImpl>(std::move(module), std::move(group), options)) {}
};

}  // namespace loom::parallel
