// The checks of the sharded strategies (ZeRO-1/2, FSDP) that every backend
// runs: sharding_test.cc over threads, sharding_mpi_test.cc under mpirun.
// Each function is one rank's part; every rank of the group calls it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/sharding/memory_model.h"
#include "parallel/sharding/zero.h"
#include "tensor/allocator.h"
#include "tests/parallel/equivalence.h"

namespace loom::parallel::testing {

// make_net's CNN has 2,479 parameters (= 37 x 67): no world size here divides it.
struct ShardCase {
  int stage = 1;
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  int micro_batches = 1;  // stage 1: > 1 accumulates gradients over several backwards
  double tolerance = 1e-10;
};

// The single-device reference and this rank's model (float64); ranks other
// than 0 start scrambled, as the strategy must start every rank from rank
// 0's parameters. Call before the ranks' threads start (it seeds the global
// generator).
inline std::pair<nn::ModulePtr, nn::ModulePtr> sharded_models(int rank) {
  manual_seed(11);
  nn::Sequential net = make_net(/*batch_norm=*/false);
  net->to(kFloat64);
  nn::ModulePtr local = net->clone();
  if (rank > 0) {
    NoGradGuard no_grad;
    for (const Tensor& t : local->parameters()) t.fill_(0.5 * rank);
  }
  return {net, local};
}

inline std::unique_ptr<optim::Optimizer> make_adamw(TensorList params) {
  return std::make_unique<optim::AdamW>(params, optim::AdamOptions{.lr = 1e-2, .weight_decay = 0.01});
}

// Four AdamW steps on a global batch of 12, each rank on its contiguous share,
// against the reference on the whole batch, compared after every step.
inline void check_zero_matches_single_device(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference,
                                             nn::ModulePtr local, const ShardCase& c) {
  namespace F = nn::functional;
  const int rank = group->rank(), world = group->size();
  const int64_t batch = 12, share = batch / world;
  auto opt_reference = make_adamw(reference->parameters());
  ZeroRedundancyOptimizer opt(local->parameters(), group, make_adamw,
                              {.stage = c.stage, .bucket_cap_bytes = c.bucket_cap_bytes});
  EXPECT_EQ(opt.numel(), 2479);
  // This rank's shard is its share of every bucket; the optimizer state covers it alone.
  EXPECT_LE(opt.shard_numel(), (2479 + world - 1) / world * static_cast<int64_t>(opt.shard().size()));
  EXPECT_GE(opt.shard_numel(), 2479 / world - static_cast<int64_t>(opt.shard().size()));

  Generator gen(5);  // the same batches on every rank
  for (int step = 0; step < 4; ++step) {
    opt_reference->zero_grad();
    opt.zero_grad();
    for (int m = 0; m < c.micro_batches; ++m) {
      Tensor x = randn({batch, 2, 6, 6}, {.dtype = kFloat64}, &gen);
      Tensor y = randint(0, 3, {batch}, {.dtype = kInt64}, &gen);
      (F::cross_entropy(reference->forward(x), y) / c.micro_batches).backward();
      Tensor mine = local->forward(x.narrow(0, rank * share, share));
      (F::cross_entropy(mine, y.narrow(0, rank * share, share)) / c.micro_batches).backward();
    }
    opt_reference->step();
    opt.step();
    EXPECT_LT(max_param_difference(*reference, *local), c.tolerance) << "rank " << rank << ", step " << step;
  }
  int64_t state_numel = 0;
  for (const auto& [name, t] : opt.inner().state_dict())
    if (name.find("exp_avg_sq") != std::string::npos) state_numel += t.numel();
  EXPECT_EQ(state_numel, opt.shard_numel()) << "Adam's state covers exactly this rank's shard";
}

// Stage 2 scatters each gradient as backward produces it: a second backward
// before step() is an error, not a silently wrong gradient.
inline void check_zero2_rejects_a_second_backward(const std::shared_ptr<ProcessGroup>& group) {
  manual_seed(3);
  nn::Linear net(4, 1);
  ZeroRedundancyOptimizer opt(net->parameters(), group, make_adamw, {.stage = 2});
  net->forward(ones({2, 4})).sum().backward();
  EXPECT_THROW_MSG(net->forward(ones({2, 4})).sum().backward(), "received a gradient twice before step()");
}

// What one rank holds between steps (after step(), before zero_grad()) is
// what the memory model says, within 10%: parameters, gradients (ZeRO-1: all
// of them; ZeRO-2: its piece's) and Adam's state for its shard. Measured by
// the CPU allocator, so one process per rank (mpirun, or a world of one).
inline void check_zero_memory(const std::shared_ptr<ProcessGroup>& group, int stage) {
  namespace F = nn::functional;
  const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
  int64_t held = 0, numel = 0;
  {
    manual_seed(2);
    nn::Sequential net(nn::Linear(256, 512), nn::Tanh(), nn::Linear(512, 512), nn::Tanh(), nn::Linear(512, 64));
    for (const Tensor& p : net->parameters()) numel += p.numel();
    ZeroRedundancyOptimizer opt(net->parameters(), group,
                                [](TensorList shard) { return std::make_unique<optim::Adam>(shard, optim::AdamOptions{}); },
                                {.stage = stage, .bucket_cap_bytes = 256 << 10});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      Tensor x = randn({8, 256});
      F::mse_loss(net->forward(x), zeros({8, 64})).backward();
      opt.step();
    }
    held = memory_stats(Device::cpu()).allocated_bytes - before;
  }

  const ModelBytes model = modeled_bytes(stage == 1 ? "zero1" : "zero2", {.numel = numel, .ranks = group->size()});
  EXPECT_NEAR(static_cast<double>(held), static_cast<double>(model.total()), 0.1 * model.total())
      << "ZeRO-" << stage << " on rank " << group->rank() << " of " << group->size() << ": measured " << held
      << " bytes, modeled " << model.total() << " (parameters " << model.parameters << ", gradients "
      << model.gradients << ", optimizer state " << model.optimizer_state << ")";
}

}  // namespace loom::parallel::testing
