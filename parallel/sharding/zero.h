// ZeroRedundancyOptimizer: ZeRO stages 1 and 2 (Rajbhandari et al., 2020).
// Data-parallel training in which each of the N ranks keeps the optimizer
// state of only its 1/N of the parameters; it wraps any loom optimizer.
//
//   auto make_adamw = [](TensorList shard) { return std::make_unique<optim::AdamW>(shard); };
//   parallel::ZeroRedundancyOptimizer opt(model->parameters(), group, make_adamw, {.stage = 2});
//   Tensor loss = loss_fn(model->forward(this_ranks_share_of_x), y);
//   opt.zero_grad();
//   loss.backward();   // stage 2: buckets of gradients are reduce-scattered as backward goes
//   opt.step();        // each rank steps its shard, then every rank gathers the new parameters
//
// How (docs/sharding.md): the parameters are grouped into buckets as DDP's
// are (bucket_plan.h), and each bucket's parameters become views of one flat
// tensor, cut into N pieces (flat_params.h). Rank r owns piece r of every
// bucket: the inner optimizer, made by `make` from views of those pieces,
// keeps state for them alone. A step:
//  1. reduce_scatter(Avg) of each bucket's flat gradient leaves rank r the
//     mean gradient of its piece. Stage 1 does it in step(), in place: the
//     parameters' gradients are views of a flat gradient per bucket. Stage 2
//     does it while backward runs, each bucket as soon as its gradients are
//     in, into a gradient buffer the size of the rank's piece; the full
//     gradients are then dropped, so at most two buckets of them exist;
//  2. the inner optimizer steps the rank's pieces (in place, in the flat
//     parameters);
//  3. all_gather of each bucket, in place, brings every rank every piece.
// Each step moves what DDP's all-reduce moves (a reduce-scatter and an
// all-gather). Per rank, for Ψ float32 parameters and Adam: ZeRO-1 holds
// parameters and gradients (8Ψ) and 1/N of Adam's state (8Ψ/N); ZeRO-2
// parameters (4Ψ), and 1/N of the gradients and of the state (12Ψ/N).
//
// Every rank starts from rank 0's parameters (broadcast at construction).
// The loss is a mean over each rank's equal share of the global batch, so the
// mean gradient is the global batch's. Between backward and step() the
// gradients are this rank's own (stage 1) or gone (stage 2): the reduction
// happens inside step(). Stage 2 takes one backward per step.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/comm/process_group.h"
#include "parallel/ddp/bucket_plan.h"
#include "parallel/sharding/flat_params.h"

namespace loom::parallel {

struct ZeroOptions {
  int stage = 1;                                 // 1: optimizer state sharded; 2: gradients too
  int64_t bucket_cap_bytes = int64_t{25} << 20;  // as DDP's
};

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(TensorList shard)>;

  ZeroRedundancyOptimizer(TensorList params, std::shared_ptr<ProcessGroup> group, MakeOptimizer make,
                          ZeroOptions options = {});
  ~ZeroRedundancyOptimizer() override;

  void step() override;
  std::vector<std::string> state_names() const override { return inner_->state_names(); }
  // This rank's part: the inner optimizer's state of its shard ("shard.<key>")
  // and where it belongs ("zero.rank", "zero.ranks", "zero.shard_numel").
  // Loading takes the same rank of the same world size and model; anything
  // else is an error that says what was saved.
  nn::NamedTensors state_dict() const override;
  void load_state_dict(const nn::NamedTensors& state) override;

  // The optimizer of this rank's pieces, and the pieces (views of the flat parameters).
  optim::Optimizer& inner() { return *inner_; }
  const TensorList& shard() const { return shard_; }
  int64_t shard_numel() const;  // elements this rank owns
  int64_t numel() const;        // elements of all the parameters
  const ZeroOptions& options() const { return options_; }

  struct Gradients;  // how each stage reduces them (zero.cc)

 private:
  std::shared_ptr<ProcessGroup> group_;
  ZeroOptions options_;
  std::vector<Bucket> buckets_;
  TensorList flat_params_;    // per bucket: its parameters are views of it
  std::vector<Pieces> pieces_;  // per bucket: every rank's piece
  TensorList shard_;          // per bucket: this rank's piece, a view of the flat parameters
  std::unique_ptr<optim::Optimizer> inner_;
  std::shared_ptr<Gradients> grads_;
};

}  // namespace loom::parallel
