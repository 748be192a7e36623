// Activation checkpointing inside the parallel strategies: a model whose
// middle blocks run under checkpoint_sequential trains as on one device with
// DDP, FSDP (the checkpointed blocks a unit) and the pipeline over ranks
// (1F1B and the split backward of ZB-H1).
// The nested backward of each replay must hand DDP's and FSDP's end-of-backward
// callbacks to the outer backward, or they would finish after the first segment.
#include <gtest/gtest.h>

#include "autograd/checkpoint.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/sharding/fsdp.h"
#include "tests/parallel/equivalence.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel {
namespace {

// The model's last layers, all under one checkpoint (its inner blocks in
// checkpointed segments too): the first gradient hooks of a backward then
// fire inside a replay's nested backward, which must hand DDP's callback to
// the outer one.
class CheckpointedImpl : public nn::Cloneable<CheckpointedImpl> {
 public:
  CheckpointedImpl() : Cloneable("Checkpointed") { reset(); }
  void reset() override {
    blocks = register_module("blocks", nn::Sequential(nn::Linear(8, 8), nn::Tanh(), nn::Linear(8, 8), nn::Tanh(),
                                                      nn::Linear(8, 3)));
  }
  Tensor forward(const Tensor& x) override {
    return autograd::checkpoint([this](const Tensor& in) { return nn::checkpoint_sequential(blocks, 2, in); }, x);
  }
  nn::Sequential blocks{nullptr};
};
LOOM_MODULE(Checkpointed);

// Input [batch, 6], 3 classes; child 1, the rest of the model, is checkpointed.
nn::Sequential make_checkpointed_net() {
  nn::Sequential net(nn::Linear(6, 8), nn::Tanh(), Checkpointed());
  net->to(kFloat64);
  return net;
}

struct Models {
  nn::ModulePtr reference, local;
};

Models models(int) {
  manual_seed(21);
  nn::Sequential reference = make_checkpointed_net();
  return {reference, reference->clone()};
}

// Three Adam steps on global batches of 12 (this rank's contiguous share):
// `module` (trained by `opt`) against the reference on whole batches.
void train_and_compare(ProcessGroup& group, nn::Module& reference, nn::Module& module, optim::Optimizer& opt,
                       const std::function<double()>& difference) {
  namespace F = nn::functional;
  optim::Adam opt_reference(reference.parameters(), {.lr = 1e-2});
  const int64_t share = 12 / group.size();
  for (int step = 0; step < 3; ++step) {
    Generator gen(40 + step);
    Tensor x = randn({12, 6}, {.dtype = kFloat64}, &gen), y = randint(0, 3, {12}, {.dtype = kInt64}, &gen);
    opt_reference.zero_grad();
    F::cross_entropy(reference.forward(x), y).backward();
    opt_reference.step();
    opt.zero_grad();
    const int64_t at = group.rank() * share;
    F::cross_entropy(module.forward(x.narrow(0, at, share)), y.narrow(0, at, share)).backward();
    opt.step();
    EXPECT_LT(difference(), 1e-10) << "rank " << group.rank() << ", step " << step;
  }
}

TEST(CheckpointParallel, DdpTrainsAsOneDevice) {
  testing::run_prepared_ranks<Models>(2, models, [](const std::shared_ptr<ProcessGroup>& group, Models& m) {
    DistributedDataParallel ddp(m.local, group, {.bucket_cap_bytes = 256});  // several buckets
    optim::Adam opt(ddp->parameters(), {.lr = 1e-2});
    train_and_compare(*group, *m.reference, *ddp, opt,
                      [&] { return testing::max_param_difference(*m.reference, *m.local); });
    EXPECT_EQ(ddp->reducer().stats().synced_backwards, 3) << "one synchronised backward per step";
  });
}

TEST(CheckpointParallel, FsdpWithTheCheckpointedBlocksAsAUnitTrainsAsOneDevice) {
  testing::run_prepared_ranks<Models>(2, models, [](const std::shared_ptr<ProcessGroup>& group, Models& m) {
    FullyShardedDataParallel fsdp(m.local, group, {.wrap = wrap_type<CheckpointedImpl>()});
    ASSERT_EQ(fsdp->units().size(), 2u);
    optim::Adam opt(fsdp->parameters(), {.lr = 1e-2});
    train_and_compare(*group, *m.reference, *fsdp, opt, [&] {
      double worst = 0;
      const nn::StateDict full = fsdp->full_state_dict();
      for (size_t i = 0; i < full.size(); ++i)
        worst = std::max(worst, loom::testing::max_rel_error(full[i].second, m.reference->parameters()[i]));
      return worst;
    });
  });
}

// 1F1B, and ZB-H1, whose input-gradient pass replays the segments to reach
// the stage's input and leaves their weights' gradients to the W pass.
void expect_checkpointed_stage_trains_as_one_device(ScheduleKind schedule) {
  testing::run_prepared_ranks<Models>(2, models, [&](const std::shared_ptr<ProcessGroup>& group, Models& m) {
    nn::Sequential whole(m.local);
    nn::ModulePtr stage = split_sequential(whole, {2})[group->rank()];
    nn::ModulePtr reference_stage = split_sequential(nn::Sequential(m.reference), {2})[group->rank()];
    DistributedPipeline pipe(stage, group, {.micro_batches = 3, .schedule = schedule});
    optim::Adam opt(pipe.parameters(), {.lr = 1e-2});
    optim::Adam opt_reference(m.reference->parameters(), {.lr = 1e-2});
    const bool first = group->rank() == 0, last = group->rank() == 1;
    for (int step = 0; step < 3; ++step) {
      Generator gen(40 + step);
      Tensor x = randn({12, 6}, {.dtype = kFloat64}, &gen), y = randint(0, 3, {12}, {.dtype = kInt64}, &gen);
      opt_reference.zero_grad();
      nn::functional::cross_entropy(m.reference->forward(x), y).backward();
      opt_reference.step();
      opt.zero_grad();
      pipe.train_step(first ? x : Tensor(), last ? y : Tensor(),
                      [](const Tensor& out, const Tensor& t) { return nn::functional::cross_entropy(out, t); });
      opt.step();
      EXPECT_LT(testing::max_param_difference(*reference_stage, *stage), 1e-10)
          << schedule_name(schedule) << " stage " << group->rank();
    }
  });
}

TEST(CheckpointParallel, PipelineStageWithCheckpointedBlocksTrainsAsOneDevice) {
  expect_checkpointed_stage_trains_as_one_device(ScheduleKind::OneFOneB);
  expect_checkpointed_stage_trains_as_one_device(ScheduleKind::ZeroBubbleH1);
}

}  // namespace
}  // namespace loom::parallel
