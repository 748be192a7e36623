// The tensor-parallel checks every backend runs (tensor_parallel_test.cc over
// threads, tensor_parallel_mpi_test.cc under mpirun): a GPT split over the
// group's ranks by its plan (parallelize) against the same GPT on one
// device, in float64.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "examples/models/gpt_plans.h"
#include "optim/optimizer.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel/conjugates.h"
#include "tests/parallel/equivalence.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {

// 4 heads (so 1, 2 or 4 ranks), a vocabulary of 16, two blocks, dropout off.
inline models::GPTConfig tp_config() {
  return {.vocab_size = 16, .block_size = 8, .n_layer = 2, .n_head = 4, .n_embd = 16, .dropout = 0};
}

// The full GPT on `device`, the same on every rank. Seeds the global
// generator: call it before the ranks' threads start.
inline models::GPT full_gpt(Device device = Device::cpu(), models::GPTConfig config = tp_config()) {
  manual_seed(17);
  models::GPT full(config);
  full->to(kFloat64);
  full->to(device);
  return full;
}

// A GPT in tensor parallel: a model of its own, cut by the GPT's plan.
struct PlannedGpt {
  models::GPT gpt;
  TensorParallel tp;  // what parallelize did: the group, the slices
  bool sequence_parallel;
};

// This rank's slices of `full`: a copy of it, parallelized over `group`.
inline PlannedGpt tp_gpt(const models::GPT& full, const std::shared_ptr<ProcessGroup>& group,
                         TokenLayout tokens = TokenLayout::kReplicated) {
  models::GPT copy(full->clone());
  const bool sequence_parallel = tokens == TokenLayout::kSequenceSharded;
  TensorParallel tp = parallelize(*copy, group, models::gpt_tensor_parallel_plan(sequence_parallel));
  return {copy, std::move(tp), sequence_parallel};
}

// Every parameter of the planned GPT against its slice of `full`'s, by
// name (local_part is the slicing the test trusts, and it is checked on its
// own by the forward comparison).
inline double max_slice_difference(const models::GPT& full, const PlannedGpt& planned) {
  const nn::NamedTensors mine = planned.gpt->named_parameters(), whole = full->named_parameters();
  EXPECT_EQ(mine.size(), whole.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(mine.size(), whole.size()); ++i) {
    EXPECT_EQ(mine[i].first, whole[i].first);
    worst = std::max(worst, loom::testing::max_rel_error(mine[i].second,
                                                         planned.tp.local_part(whole[i].first, whole[i].second)));
  }
  return worst;
}

// One AdamW step of the unsharded GPT on the whole batch, its gradients
// clipped to 0.5: the step every check below holds its ranks to.
struct StepResult {  // a step's loss and clipped gradient norm
  double loss, norm;
};
inline StepResult reference_step(models::GPT& full, optim::Optimizer& opt, const Tensor& idx, const Tensor& targets) {
  opt.zero_grad();
  Tensor loss = nn::functional::cross_entropy(full->forward(idx).reshape({-1, 16}), targets.reshape({-1}));
  loss.backward();
  const Tensor norm = optim::clip_grad_norm_(full->parameters(), 0.5);
  opt.step();
  return {loss.item(), norm.item()};
}

// The same step of this rank's slices, on the whole batch.
inline StepResult tensor_parallel_step(PlannedGpt& planned, optim::Optimizer& opt, const Tensor& idx,
                                       const Tensor& targets) {
  opt.zero_grad();
  Tensor loss = vocab_parallel_cross_entropy(planned.gpt->forward(idx), targets, planned.tp.group);
  loss.backward();
  const Tensor norm = planned.tp.clip_grad_norm_(0.5);
  opt.step();
  return {loss.item(), norm.item()};
}

// The mean of every rank's `loss` in `group` (ranks that each took a share
// of the batch or of the sequence: the whole's loss).
inline double mean_over(ProcessGroup& group, const Tensor& loss) {
  Tensor mean = loss.detach().clone().reshape({1});
  group.all_reduce(mean, ReduceOp::Avg)->wait();
  return mean.item();
}

// This rank's step (its loss, its clipped norm) against the reference, and
// the largest difference of its weights from the reference's after it.
inline void expect_same_step(const StepResult& expected, const StepResult& mine, double weights_difference, int rank,
                             int step) {
  EXPECT_NEAR(mine.loss, expected.loss, 1e-12) << "step " << step;
  EXPECT_NEAR(mine.norm, expected.norm, 1e-10 * expected.norm) << "step " << step;
  EXPECT_LT(weights_difference, 1e-10) << "rank " << rank << ", step " << step;
}

// Forward (gathered logits and the loss from split logits), then three AdamW
// steps with gradient clipping, each compared with the unsharded GPT. With
// the tokens sharded (sequence parallel) every replicated parameter's
// gradient must still be the whole one: the norm and the steps check it.
inline void check_tp_gpt_matches_single_device(const std::shared_ptr<ProcessGroup>& group, models::GPT full,
                                               TokenLayout tokens = TokenLayout::kReplicated) {
  PlannedGpt tp = tp_gpt(full, group, tokens);
  const Device device = full->head->weight.device();
  Generator gen(5);  // the same batch on every rank: tensor parallelism splits the model, not the data
  Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen).to(device),
         targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen).to(device);
  {
    NoGradGuard no_grad;
    EXPECT_LT(loom::testing::max_rel_error(gather_from_tensor_parallel(tp.gpt->forward(idx), group), full->forward(idx)),
              1e-12);
    EXPECT_EQ(tp.gpt->forward(idx).size(2), 16 / group->size()) << "each rank holds its slice of the vocabulary";
  }
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp.gpt->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    const StepResult mine = tensor_parallel_step(tp, opt_tp, idx, targets);
    expect_same_step(expected, mine, max_slice_difference(full, tp), group->rank(), step);
  }
  // Generation gathers the logits: every rank samples the same tokens as the full model
  // (sequence parallel: from windows of 1 to 6 tokens, padded to the ranks).
  Generator g1(3), g2(3);
  Tensor start = zeros({1, 1}, {.dtype = kInt64, .device = device});
  EXPECT_EQ(models::generate(*tp.gpt, {.tensor = group, .sequence_parallel = tp.sequence_parallel}, start, 5, 1.0, &g1)
                .to_vector<int64_t>(),
            full->generate(start, 5, 1.0, &g2).to_vector<int64_t>());
}

// Data x tensor parallel on a D x T mesh (rank = data * T + tensor): each
// data replica is a GPT in tensor parallel over its tensor group, trained
// on its 1/D of the batch, with DDP averaging every slice's gradient over
// the data group (the ranks that hold the same slice). Three AdamW steps
// with clipping against the whole GPT on the whole batch: the same loss
// (the replicas' mean), norm and weights.
inline void check_data_x_tensor_parallel_matches_single_device(const std::shared_ptr<ProcessGroup>& world, int data,
                                                               models::GPT full, TokenLayout tokens) {
  DeviceMesh mesh(world, {{"data", data}, {"tensor", world->size() / data}});
  const std::shared_ptr<ProcessGroup>& tensor_group = mesh.group("tensor");
  PlannedGpt tp = tp_gpt(full, tensor_group, tokens);
  DistributedDataParallel replica(tp.gpt, mesh.group("data"));
  const Device device = full->head->weight.device();
  Generator gen(6);  // the whole batch on every rank; each replica takes its share
  const int64_t share = 2;
  Tensor idx = randint(0, 16, {share * data, 8}, {.dtype = kInt64}, &gen).to(device),
         targets = randint(0, 16, {share * data, 8}, {.dtype = kInt64}, &gen).to(device);
  const int64_t first = share * mesh.coordinate("data");
  Tensor my_idx = idx.narrow(0, first, share), my_targets = targets.narrow(0, first, share);
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp.gpt->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    opt_tp.zero_grad();
    Tensor loss = vocab_parallel_cross_entropy(replica->forward(my_idx), my_targets, tensor_group);
    loss.backward();  // DDP averages each slice's gradient over the data group
    const Tensor norm = tp.tp.clip_grad_norm_(0.5);
    opt_tp.step();
    expect_same_step(expected, {mean_over(*mesh.group("data"), loss), norm.item()}, max_slice_difference(full, tp),
                     world->rank(), step);
  }
}

// With dropout (training mode): ranks of one process each, or rank threads
// each holding a ThreadDefaultGenerator, seeded alike, draw the masks the
// unsharded GPT draws from the same seed, in either layout (sequence
// sharded, each rank draws the whole sequence's mask and keeps its tokens'
// part), so the weights stay equal step after step.
inline void check_tp_gpt_with_dropout_matches_single_device(const std::shared_ptr<ProcessGroup>& group,
                                                            TokenLayout tokens) {
  models::GPTConfig config = tp_config();
  config.dropout = 0.2;
  models::GPT full = full_gpt(Device::cpu(), config);
  PlannedGpt tp = tp_gpt(full, group, tokens);
  Generator gen(5);
  Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen), targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen);
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp.gpt->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    manual_seed(100 + step);
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    manual_seed(100 + step);  // the same masks
    const StepResult mine = tensor_parallel_step(tp, opt_tp, idx, targets);
    expect_same_step(expected, mine, max_slice_difference(full, tp), group->rank(), step);
  }
  full->eval();  // the masks mattered: without them the loss differs
  Tensor no_dropout = nn::functional::cross_entropy(full->forward(idx).reshape({-1, 16}), targets.reshape({-1}));
  Tensor with_dropout = vocab_parallel_cross_entropy(tp.gpt->forward(idx), targets, group);
  EXPECT_GT(std::abs(no_dropout.item() - with_dropout.item()), 1e-3) << "dropout was off";
}

}  // namespace loom::parallel::testing
