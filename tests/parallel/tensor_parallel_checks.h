// The tensor-parallel checks every backend runs (tensor_parallel_test.cc over
// threads, tensor_parallel_mpi_test.cc under mpirun): a GPT split over the
// group's ranks against the same GPT on one device, in float64.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "examples/models/tensor_parallel_gpt.h"
#include "optim/optimizer.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/ddp/distributed_data_parallel.h"
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

// This rank's slices of `full`, on full's device.
inline models::TensorParallelGPT tp_gpt(const models::GPT& full, const std::shared_ptr<ProcessGroup>& group,
                                        TokenLayout tokens = TokenLayout::kReplicated) {
  models::TensorParallelGPT tp(full->config, group, tokens);
  tp->to(kFloat64);
  tp->to(full->head->weight.device());
  tp->load_from(*full);
  return tp;
}

// Every parameter of `tp` against its slice of `full`'s, through a fresh
// model that loads `full` (load_from is the slicing the test trusts, and it
// is checked on its own by the forward comparison).
inline double max_slice_difference(const models::GPT& full, const models::TensorParallelGPT& tp,
                                   const std::shared_ptr<ProcessGroup>& group) {
  models::TensorParallelGPT expected = tp_gpt(full, group, tp->tokens());
  return max_param_difference(*tp, *expected);
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
inline StepResult tensor_parallel_step(models::TensorParallelGPT& tp, optim::Optimizer& opt, const Tensor& idx,
                                          const Tensor& targets) {
  opt.zero_grad();
  Tensor loss = tp->loss(idx, targets);
  loss.backward();
  const Tensor norm = tp->clip_grad_norm_(0.5);
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
  models::TensorParallelGPT tp = tp_gpt(full, group, tokens);
  const Device device = full->head->weight.device();
  Generator gen(5);  // the same batch on every rank: tensor parallelism splits the model, not the data
  Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen).to(device),
         targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen).to(device);
  {
    NoGradGuard no_grad;
    EXPECT_LT(loom::testing::max_rel_error(tp->full_logits(idx), full->forward(idx)), 1e-12);
    EXPECT_EQ(tp->forward(idx).size(2), 16 / group->size()) << "each rank holds its slice of the vocabulary";
  }
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    const StepResult mine = tensor_parallel_step(tp, opt_tp, idx, targets);
    expect_same_step(expected, mine, max_slice_difference(full, tp, group), group->rank(), step);
  }
  // Generation gathers the logits: every rank samples the same tokens as the full model
  // (sequence parallel: from windows of 1 to 6 tokens, padded to the ranks).
  Generator g1(3), g2(3);
  Tensor start = zeros({1, 1}, {.dtype = kInt64, .device = device});
  EXPECT_EQ(tp->generate(start, 5, 1.0, &g1).to_vector<int64_t>(), full->generate(start, 5, 1.0, &g2).to_vector<int64_t>());
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
  models::TensorParallelGPT tp = tp_gpt(full, tensor_group, tokens);
  DistributedDataParallel replica(tp, mesh.group("data"));
  const Device device = full->head->weight.device();
  Generator gen(6);  // the whole batch on every rank; each replica takes its share
  const int64_t share = 2;
  Tensor idx = randint(0, 16, {share * data, 8}, {.dtype = kInt64}, &gen).to(device),
         targets = randint(0, 16, {share * data, 8}, {.dtype = kInt64}, &gen).to(device);
  const int64_t first = share * mesh.coordinate("data");
  Tensor my_idx = idx.narrow(0, first, share), my_targets = targets.narrow(0, first, share);
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    opt_tp.zero_grad();
    Tensor loss = vocab_parallel_cross_entropy(replica->forward(my_idx), my_targets, tensor_group);
    loss.backward();  // DDP averages each slice's gradient over the data group
    const Tensor norm = tp->clip_grad_norm_(0.5);
    opt_tp.step();
    expect_same_step(expected, {mean_over(*mesh.group("data"), loss), norm.item()},
                     max_slice_difference(full, tp, tensor_group), world->rank(), step);
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
  models::TensorParallelGPT tp = tp_gpt(full, group, tokens);
  Generator gen(5);
  Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen), targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen);
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    manual_seed(100 + step);
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    manual_seed(100 + step);  // the same masks
    const StepResult mine = tensor_parallel_step(tp, opt_tp, idx, targets);
    expect_same_step(expected, mine, max_slice_difference(full, tp, group), group->rank(), step);
  }
  full->eval();  // the masks mattered: without them the loss differs
  Tensor no_dropout = nn::functional::cross_entropy(full->forward(idx).reshape({-1, 16}), targets.reshape({-1}));
  EXPECT_GT(std::abs(no_dropout.item() - tp->loss(idx, targets).item()), 1e-3) << "dropout was off";
}

}  // namespace loom::parallel::testing
