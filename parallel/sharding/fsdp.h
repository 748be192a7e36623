// FullyShardedDataParallel: ZeRO stage 3 (PyTorch's FSDP). Data-parallel
// training in which the parameters themselves are sharded at rest: each of
// the N ranks keeps 1/N of them, their gradients and their optimizer state,
// and a unit of the model is gathered whole only while it computes.
//
//   parallel::FullyShardedDataParallel fsdp(model, group, {.wrap = parallel::wrap_type<models::BlockImpl>()});
//   optim::AdamW opt(fsdp->parameters(), {});   // the shards: one flat piece per unit
//   for (...) {
//     opt.zero_grad();
//     loss_fn(fsdp->forward(this_ranks_share_of_x), y).backward();
//     opt.step();                               // each rank steps its shards
//   }
//   if (rank == 0) nn::save_safetensors("model.safetensors", full);  // full = fsdp->full_state_dict()
//
// Units. The wrap policy picks modules (a GPT block, a conv block) that
// become units of their own; the root unit holds every other parameter.
// Each unit's parameters become views of one flat tensor (fsdp_unit.h).
// FSDP puts a wrapper in the unit's place among its parent's children, so the
// policy may pick children of Sequential and ModuleList, which call their
// children through that list.
//
// A step, per unit (docs/sharding.md has the trace):
//   forward    all_gather the pieces, run the unit, free the gathered memory
//              (the root stays gathered until its backward); meanwhile the
//              next unit's all_gather is already in flight (prefetch, in the
//              order the previous forward met the units);
//   backward   when the gradient reaches the unit's output, all_gather again
//              (and prefetch the unit before it); once every parameter's
//              gradient is in, reduce_scatter(Avg) them, so the rank gets
//              the mean gradient of its piece as shard.grad(), and free the
//              gathered memory.
// Per rank, for Ψ float32 parameters and Adam: 16Ψ/N at rest, plus the
// gathered units while they compute. Each step moves 1.5 times DDP's bytes:
// two all-gathers and one reduce-scatter of the parameters.
//
// Every rank starts from rank 0's parameters. Buffers (BatchNorm statistics)
// are not synchronised. The shards are what an optimizer steps; the wrapped
// module's own parameters have no memory outside forward and backward (read
// them with full_state_dict()).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/comm/process_group.h"
#include "parallel/sharding/fsdp_unit.h"

namespace loom::parallel {

struct FsdpOptions {
  // Whether the module at `name` (a dotted path in the model) becomes a unit
  // of its own. Unset: the whole model is one unit.
  std::function<bool(const std::string& name, const nn::Module& module)> wrap;
  // Gather the next unit while this one computes.
  bool prefetch = true;
};

// A wrap policy: every module of type Impl is a unit.
template <typename Impl>
std::function<bool(const std::string&, const nn::Module&)> wrap_type() {
  return [](const std::string&, const nn::Module& m) { return dynamic_cast<const Impl*>(&m) != nullptr; };
}

class FullyShardedDataParallelImpl : public nn::Module {
 public:
  FullyShardedDataParallelImpl(nn::ModulePtr module, std::shared_ptr<ProcessGroup> group, FsdpOptions options = {});

  Tensor forward(const Tensor& x) override;
  // Reaches the wrapped model, which is not a registered child (parameters()
  // are the shards): eval() turns its Dropout and BatchNorm to evaluation.
  void train(bool on = true) override;

  const nn::ModulePtr& module() const { return module_; }
  ProcessGroup& process_group() const { return *group_; }
  // The units, the root first; parameters() are their shards, in this order.
  const std::vector<std::shared_ptr<FsdpUnit>>& units() const;
  int64_t numel() const;        // elements of all the parameters
  int64_t shard_numel() const;  // elements this rank keeps

  // Every parameter (by its name in the wrapped model) and buffer, gathered
  // whole: what the unwrapped model's state_dict() would give, loadable by a
  // single-device model. Collective: every rank calls it, and every rank gets it.
  nn::StateDict full_state_dict();
  // Each rank takes its pieces of full values (from full_state_dict(), at any world size).
  void load_full_state_dict(const nn::StateDict& state);

  struct Runtime;  // the schedule of gathers and reductions (fsdp.cc)

 private:
  nn::ModulePtr module_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<Runtime> runtime_;
};

class FullyShardedDataParallel : public nn::ModuleHolder<FullyShardedDataParallelImpl> {
 public:
  FullyShardedDataParallel(std::nullptr_t) : ModuleHolder(nullptr) {}
  FullyShardedDataParallel(nn::ModulePtr module, std::shared_ptr<ProcessGroup> group, FsdpOptions options = {})
      : ModuleHolder(std::make_shared<FullyShardedDataParallelImpl>(std::move(module), std::move(group),
                                                                   std::move(options))) {}
};

}  // namespace loom::parallel
