// The checks of the sharded strategies (ZeRO-1/2, FSDP) that every backend
// runs: sharding_test.cc over threads, sharding_mpi_test.cc under mpirun.
// Each function is one rank's part; every rank of the group calls it.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/sharding/fsdp.h"
#include "parallel/sharding/fsdp_checkpoint.h"
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
  Device device = Device::cpu();  // of both models and the batches
};

// The single-device reference and this rank's model (float64, both on
// `device`); ranks other than 0 start scrambled, as the strategy must start
// every rank from rank 0's parameters. Call before the ranks' threads start
// (it seeds the global generator).
inline std::pair<nn::ModulePtr, nn::ModulePtr> reference_and_local(nn::ModulePtr net, int rank,
                                                                   Device device = Device::cpu()) {
  net->to(kFloat64);
  net->to(device);
  nn::ModulePtr local = net->clone();
  if (rank > 0) {
    NoGradGuard no_grad;
    for (const Tensor& t : local->parameters()) t.fill_(0.5 * rank);
  }
  return {net, local};
}

inline std::pair<nn::ModulePtr, nn::ModulePtr> sharded_models(int rank, Device device = Device::cpu()) {
  manual_seed(11);
  return reference_and_local(make_net(/*batch_norm=*/false), rank, device);
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
      Tensor x = randn({batch, 2, 6, 6}, {.dtype = kFloat64}, &gen).to(c.device);
      Tensor y = randint(0, 3, {batch}, {.dtype = kInt64}, &gen).to(c.device);
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

// ---- FSDP ----

// How the model is cut into units.
enum class Units {
  Whole,   // one unit: the root
  Layers,  // every Conv2d and Linear a unit; the root keeps the LayerNorm
  Nested,  // make_nested_net's blocks as units, with a unit inside one of them
};

struct FsdpCase {
  Units units = Units::Layers;
  bool prefetch = true;
  int micro_batches = 1;  // > 1: gradients accumulate over several backwards
  int steps = 4;
  double tolerance = 1e-10;
  Device device = Device::cpu();  // of both models and the batches
};

// make_net's layers regrouped into blocks: Sequential(Sequential(conv, relu),
// flatten, Sequential(linear, layer norm, tanh), linear); same parameters.
inline nn::Sequential make_nested_net() {
  nn::Sequential flat = make_net(/*batch_norm=*/false);
  auto block = [&](std::initializer_list<size_t> layers) {
    nn::Sequential b;
    for (size_t i : layers) b->push_back((*flat)[i]);
    return b;
  };
  nn::Sequential net;
  net->push_back(block({0, 1}));
  net->push_back((*flat)[2]);
  net->push_back(block({3, 4, 5}));
  net->push_back((*flat)[6]);
  return net;
}

inline FsdpOptions fsdp_options(const FsdpCase& c) {
  FsdpOptions options;
  options.prefetch = c.prefetch;
  if (c.units == Units::Layers)
    options.wrap = [](const std::string&, const nn::Module& m) {
      return dynamic_cast<const nn::LinearImpl*>(&m) != nullptr || dynamic_cast<const nn::Conv2dImpl*>(&m) != nullptr;
    };
  if (c.units == Units::Nested)
    options.wrap = [](const std::string& name, const nn::Module&) { return name == "0" || name == "2" || name == "2.0"; };
  return options;
}

// The reference (single device) and this rank's model, as sharded_models.
inline std::pair<nn::ModulePtr, nn::ModulePtr> fsdp_models(int rank, Units units, Device device = Device::cpu()) {
  manual_seed(11);
  return reference_and_local(units == Units::Nested ? nn::ModulePtr(make_nested_net()) : nn::ModulePtr(make_net(false)),
                             rank, device);
}

// The largest relative difference between a full state and a model's parameters, by name.
inline double max_state_difference(const nn::StateDict& full, const nn::Module& reference) {
  std::map<std::string, Tensor> by_name(full.begin(), full.end());
  double worst = 0;
  for (const auto& [name, p] : reference.named_parameters()) {
    auto it = by_name.find(name);
    EXPECT_TRUE(it != by_name.end()) << "the full state has no " << name;
    if (it != by_name.end()) worst = std::max(worst, loom::testing::max_rel_error(it->second, p));
  }
  return worst;
}

// The training both sides run: `steps` AdamW steps on global batches of 12
// (this rank's contiguous share for the sharded side), from batch `first_step`
// of a fixed stream, so that a resumed run continues the same stream.
struct FsdpTraining {
  nn::ModulePtr reference;
  std::unique_ptr<optim::Optimizer> opt_reference;
  FullyShardedDataParallel fsdp{nullptr};
  std::unique_ptr<optim::Optimizer> opt;
};

// Batch `step` of the stream, the same on every rank: micro-batch m's inputs and targets.
inline std::pair<Tensor, Tensor> stream_batch(int step, int m, Device device = Device::cpu()) {
  Generator gen(1000 + 100 * step + m);
  Tensor x = randn({12, 2, 6, 6}, {.dtype = kFloat64}, &gen);
  return {x.to(device), randint(0, 3, {12}, {.dtype = kInt64}, &gen).to(device)};
}

inline void train_reference_steps(nn::Module& reference, optim::Optimizer& opt, int first_step, int steps,
                                  const FsdpCase& c) {
  namespace F = nn::functional;
  for (int step = first_step; step < first_step + steps; ++step) {
    opt.zero_grad();
    for (int m = 0; m < c.micro_batches; ++m) {
      auto [x, y] = stream_batch(step, m, c.device);
      (F::cross_entropy(reference.forward(x), y) / c.micro_batches).backward();
    }
    opt.step();
  }
}

inline void train_steps(FsdpTraining& t, ProcessGroup& group, int first_step, int steps, const FsdpCase& c,
                        bool compare_every_step = true) {
  namespace F = nn::functional;
  const int rank = group.rank(), world = group.size();
  const int64_t share = 12 / world;
  for (int step = first_step; step < first_step + steps; ++step) {
    if (t.reference) train_reference_steps(*t.reference, *t.opt_reference, step, 1, c);
    t.opt->zero_grad();
    for (int m = 0; m < c.micro_batches; ++m) {
      auto [x, y] = stream_batch(step, m, c.device);
      Tensor mine = t.fsdp->forward(x.narrow(0, rank * share, share));
      (F::cross_entropy(mine, y.narrow(0, rank * share, share)) / c.micro_batches).backward();
    }
    t.opt->step();
    if (!compare_every_step) continue;
    const nn::StateDict full = t.fsdp->full_state_dict();  // a collective: every rank gathers
    if (t.reference) {
      EXPECT_LT(max_state_difference(full, *t.reference), c.tolerance) << "rank " << rank << ", step " << step;
    }
  }
}

inline FsdpTraining fsdp_training(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference,
                                  nn::ModulePtr local, const FsdpCase& c) {
  FsdpTraining t;
  t.reference = reference;
  if (reference) t.opt_reference = make_adamw(reference->parameters());
  t.fsdp = FullyShardedDataParallel(local, group, fsdp_options(c));
  t.opt = make_adamw(t.fsdp->parameters());
  return t;
}

inline void check_fsdp_matches_single_device(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference,
                                             nn::ModulePtr local, const FsdpCase& c) {
  FsdpTraining t = fsdp_training(group, reference, local, c);
  EXPECT_EQ(t.fsdp->numel(), 2479);
  const size_t expected_units = c.units == Units::Whole ? 1 : c.units == Units::Layers ? 4 : 4;
  EXPECT_EQ(t.fsdp->units().size(), expected_units);
  train_steps(t, *group, 0, c.steps, c);
  // At rest nothing is gathered: the rank holds its shards alone.
  for (const auto& unit : t.fsdp->units()) EXPECT_FALSE(unit->gathered()) << "unit '" << unit->name() << "'";
  EXPECT_LE(t.fsdp->shard_numel(), 2479 / group->size() + static_cast<int64_t>(t.fsdp->units().size()));
  EXPECT_THROW_MSG(local->parameters().back().raw_data(), "whose memory is released");
  // Eval-mode forward without gradients gathers and frees as well, and gives the reference's outputs.
  {
    NoGradGuard no_grad;
    Tensor x = randn({3, 2, 6, 6}, {.dtype = kFloat64}).to(c.device);
    EXPECT_LT(loom::testing::max_rel_error(t.fsdp->forward(x), reference->forward(x)), c.tolerance);
    for (const auto& unit : t.fsdp->units()) EXPECT_FALSE(unit->gathered());
  }
}

// What one step moves: each unit is gathered for forward and again for
// backward (the root, which stays gathered, once) and its gradient
// reduce-scattered once; with the root small, 1.5 times DDP's all-reduce.
inline void check_fsdp_traffic(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr local) {
  const FsdpCase c{.units = Units::Layers};
  FsdpTraining t = fsdp_training(group, nullptr, local, c);
  train_steps(t, *group, 0, 1, c, false);
  const CommStats before = group->stats();
  train_steps(t, *group, 1, 1, c, false);
  const CommStats after = group->stats();
  const int64_t n = group->size();
  int64_t expected_bus = 0, expected_ops = 0, all_reduce_bus = 0;
  for (const auto& unit : t.fsdp->units()) {
    const int64_t bytes = unit->flat().numel() * 8;  // float64
    const int gathers = unit->name().empty() ? 1 : 2;
    expected_bus += (gathers + 1) * (bytes * (n - 1) / n);
    expected_ops += gathers + 1;
    all_reduce_bus += bytes * 2 * (n - 1) / n;
  }
  EXPECT_EQ(after.ops - before.ops, expected_ops);
  EXPECT_EQ(after.bus_bytes - before.bus_bytes, expected_bus);
  if (n > 1) {
    EXPECT_NEAR(static_cast<double>(expected_bus) / all_reduce_bus, 1.5, 0.01);
  }
}

// The full state, gathered at N ranks, loads into a single-device model and
// gives the same parameters (and so the same outputs) as the reference.
inline void check_fsdp_full_state_loads_on_one_device(const std::shared_ptr<ProcessGroup>& group,
                                                      nn::ModulePtr reference, nn::ModulePtr local,
                                                      const std::string& path) {
  const FsdpCase c;
  FsdpTraining t = fsdp_training(group, reference, local, c);
  train_steps(t, *group, 0, 2, c, /*compare_every_step=*/false);
  const nn::StateDict full = t.fsdp->full_state_dict();
  if (group->rank() == 0) nn::save_safetensors(path, full);
  group->barrier()->wait();
  nn::ModulePtr single = make_net(false);
  single->to(kFloat64);
  single->load_state_dict(nn::load_safetensors(path).tensors);
  EXPECT_LT(max_param_difference(*single, *reference), 1e-10);
  EXPECT_LT(max_state_difference(full, *single), 1e-300) << "the file holds the gathered values exactly";
}

// Sharded save at N, then a fresh model and optimizer at the same N load it
// and train on: the same as never stopping (the reference trains throughout).
inline void check_fsdp_sharded_resume(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference,
                                      nn::ModulePtr local, nn::ModulePtr fresh, const std::string& dir) {
  const FsdpCase c;
  FsdpTraining t = fsdp_training(group, reference, local, c);
  train_steps(t, *group, 0, 2, c, false);
  save_sharded(dir, *t.fsdp, *t.opt);
  FsdpTraining resumed = fsdp_training(group, nullptr, fresh, c);
  load_sharded(dir, *resumed.fsdp, *resumed.opt);
  resumed.reference = reference;
  resumed.opt_reference = std::move(t.opt_reference);
  train_steps(resumed, *group, 2, 2, c);
}

// Part one of a resume at another world size: train 2 steps at this N, write
// the full model and optimizer state to `path` (rank 0).
inline void fsdp_train_and_save_full(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr local,
                                     const std::string& path) {
  const FsdpCase c;
  FsdpTraining t = fsdp_training(group, nullptr, local, c);
  train_steps(t, *group, 0, 2, c, false);
  nn::StateDict all = t.fsdp->full_state_dict();
  for (auto& [key, value] : full_optimizer_state_dict(*t.fsdp, *t.opt)) all.emplace_back("optimizer." + key, value);
  if (group->rank() == 0) nn::save_safetensors(path, all);
  group->barrier()->wait();
}

// Part two: at this N, a fresh model loads the full state and trains 2 more
// steps; the reference has trained all 4 (its first 2 given here).
inline void fsdp_resume_full(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference,
                             std::unique_ptr<optim::Optimizer> opt_reference, nn::ModulePtr fresh,
                             const std::string& path) {
  const FsdpCase c;
  FsdpTraining t = fsdp_training(group, nullptr, fresh, c);
  nn::StateDict model_state, optimizer_state;
  for (auto& [key, value] : nn::load_safetensors(path).tensors)
    (key.compare(0, 10, "optimizer.") == 0 ? optimizer_state : model_state)
        .emplace_back(key.compare(0, 10, "optimizer.") == 0 ? key.substr(10) : key, value);
  t.fsdp->load_full_state_dict(model_state);
  load_full_optimizer_state_dict(*t.fsdp, *t.opt, optimizer_state);
  t.reference = reference;
  t.opt_reference = std::move(opt_reference);
  train_steps(t, *group, 2, 2, c);
}

// Like check_zero_memory: between steps a rank holds its shards, their
// gradients and Adam's state for them (16Ψ/N), nothing gathered. The root
// has no parameters of its own here (every Linear is a unit).
inline void check_fsdp_memory(const std::shared_ptr<ProcessGroup>& group) {
  namespace F = nn::functional;
  const int64_t before = memory_stats(Device::cpu()).allocated_bytes;
  int64_t held = 0, numel = 0;
  {
    manual_seed(2);
    nn::Sequential net(nn::Linear(256, 512), nn::Tanh(), nn::Linear(512, 512), nn::Tanh(), nn::Linear(512, 64));
    for (const Tensor& p : net->parameters()) numel += p.numel();
    FullyShardedDataParallel fsdp(net, group, {.wrap = wrap_type<nn::LinearImpl>()});
    optim::Adam opt(fsdp->parameters(), {});
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      F::mse_loss(fsdp->forward(randn({8, 256})), zeros({8, 64})).backward();
      opt.step();
    }
    held = memory_stats(Device::cpu()).allocated_bytes - before;
  }
  const ModelBytes model = modeled_bytes("fsdp", {.numel = numel, .ranks = group->size()});
  EXPECT_NEAR(static_cast<double>(held), static_cast<double>(model.total()), 0.1 * model.total())
      << "FSDP on rank " << group->rank() << " of " << group->size() << ": measured " << held
      << " bytes at rest, modeled " << model.total();
}

// ZeRO resumes from each rank's saved state: train 2 steps, save the model
// (whole on every rank) and the optimizer's shard, build fresh ones, load,
// train 2 more: the reference trains 4 without stopping.
inline void check_zero_resume(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference, nn::ModulePtr local,
                              nn::ModulePtr fresh, int stage, const std::string& dir) {
  namespace F = nn::functional;
  const int rank = group->rank(), share = 12 / group->size();
  auto opt_reference = make_adamw(reference->parameters());
  auto train = [&](nn::Module& model, optim::Optimizer& opt, int first, int steps) {
    for (int step = first; step < first + steps; ++step) {
      train_reference_steps(*reference, *opt_reference, step, 1, {});
      opt.zero_grad();
      auto [x, y] = stream_batch(step, 0);
      F::cross_entropy(model.forward(x.narrow(0, rank * share, share)), y.narrow(0, rank * share, share)).backward();
      opt.step();
    }
  };
  const std::string path = dir + "/zero" + std::to_string(stage) + "-rank" + std::to_string(rank) + ".safetensors";
  {
    ZeroRedundancyOptimizer opt(local->parameters(), group, make_adamw, {.stage = stage, .bucket_cap_bytes = 2048});
    train(*local, opt, 0, 2);
    nn::StateDict all = local->state_dict();
    for (auto& [key, t] : opt.state_dict()) all.emplace_back("optimizer." + key, t);
    nn::save_safetensors(path, all);
  }
  nn::StateDict model_state, optimizer_state;
  for (auto& [key, t] : nn::load_safetensors(path).tensors)
    (key.compare(0, 10, "optimizer.") == 0 ? optimizer_state : model_state)
        .emplace_back(key.compare(0, 10, "optimizer.") == 0 ? key.substr(10) : key, t);
  fresh->load_state_dict(model_state);
  ZeroRedundancyOptimizer opt(fresh->parameters(), group, make_adamw, {.stage = stage, .bucket_cap_bytes = 2048});
  opt.load_state_dict(optimizer_state);
  train(*fresh, opt, 2, 2);
  EXPECT_LT(max_param_difference(*reference, *fresh), 1e-10) << "rank " << rank;
}

}  // namespace loom::parallel::testing
