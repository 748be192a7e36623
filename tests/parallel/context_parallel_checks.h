// The context-parallel checks every backend runs (context_parallel_test.cc
// over threads, context_parallel_mpi_test.cc under mpirun): the GPT with
// each rank on its 1/N of every sequence's tokens, DDP averaging the
// weights' gradients, against the same GPT on the whole sequences.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "examples/models/gpt_plans.h"
#include "parallel/context_parallel/context_parallel.h"
#include "tests/parallel/tensor_parallel_checks.h"

namespace loom::parallel::testing {

// The reference and this rank's copy of it (the same seed, so the same
// weights), on `device`.
using ReferenceAndCopy = std::pair<models::GPT, models::GPT>;
inline ReferenceAndCopy reference_and_copy(models::GPTConfig config = tp_config(), Device device = Device::cpu()) {
  return {full_gpt(device, config), full_gpt(device, config)};
}

// Three AdamW steps with clipping: the ranks' mean loss, the clipped norm
// and every weight as the whole GPT's on whole sequences of 8 tokens, each
// rank on its tokens as `split` deals them and its attention getting the
// other ranks' keys and values by `exchange`.
// `reseed` makes every step draw the same dropout masks on both sides.
inline void check_cp_gpt_matches_single_device(const std::shared_ptr<ProcessGroup>& group, ReferenceAndCopy& models,
                                               SequenceSplit split, bool reseed = false,
                                               KeyValueExchange exchange = KeyValueExchange::kAllGather) {
  auto& [full, copy] = models;
  context_parallel(*copy, group, models::gpt_context_parallel({.split = split, .exchange = exchange}));
  DistributedDataParallel replica(copy, group);
  const Device device = full->head->weight.device();
  Generator gen(5);
  const Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen).to(device),
               targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen).to(device);
  const Tensor my_idx = shard_sequence(idx, *group, split), my_targets = shard_sequence(targets, *group, split);
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_cp(copy->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    if (reseed) manual_seed(100 + step);
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    if (reseed) manual_seed(100 + step);
    opt_cp.zero_grad();
    Tensor loss = nn::functional::cross_entropy(replica->forward(my_idx).reshape({-1, 16}), my_targets.reshape({-1}));
    loss.backward();  // keys' and values' gradients reduce-scattered; DDP averages the weights'
    const Tensor norm = optim::clip_grad_norm_(copy->parameters(), 0.5);
    opt_cp.step();
    expect_same_step(expected, {mean_over(*group, loss), norm.item()}, max_param_difference(*copy, *full),
                     group->rank(), step);
  }
  if (!reseed) {  // evaluation and sampling see the whole sequence's logits, put back in order
    NoGradGuard no_grad;
    const models::GptLayout layout{.context = group, .split = split};
    EXPECT_LT(loom::testing::max_rel_error(models::whole_logits(*copy, layout, idx), full->forward(idx)), 1e-10);
  }
}

// Context x tensor parallel on a C x T mesh (rank = context * T + tensor):
// the GPT's slices over each tensor group, each rank on its 1/C of every
// sequence as `split` deals them, the keys and values exchanged by
// `exchange` between the ranks holding the same heads, and DDP averaging
// every slice's gradient over the context group. Three AdamW steps with
// clipping against `full` (this rank's copy of the whole GPT, from
// full_gpt) on whole sequences: the ranks' mean loss, the clipped norm and
// every slice of the weights. With dropout each step reseeds on both sides,
// so that both draw the same masks.
inline void check_context_x_tensor_parallel_matches_single_device(const std::shared_ptr<ProcessGroup>& world,
                                                                  models::GPT& full, int context, SequenceSplit split,
                                                                  KeyValueExchange exchange) {
  const bool reseed = full->config.dropout > 0;
  DeviceMesh mesh(world, {{"context", context}, {"tensor", world->size() / context}});
  const std::shared_ptr<ProcessGroup>&context_group = mesh.group("context"), &tensor_group = mesh.group("tensor");
  PlannedGpt tp = tp_gpt(full, tensor_group);
  context_parallel(*tp.gpt, context_group, models::gpt_context_parallel({.split = split, .exchange = exchange}));
  DistributedDataParallel replica(tp.gpt, context_group);  // the ranks that hold the same slices
  Generator gen(5);
  const Tensor idx = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen),
               targets = randint(0, 16, {3, 8}, {.dtype = kInt64}, &gen);
  const Tensor my_idx = shard_sequence(idx, *context_group, split),
               my_targets = shard_sequence(targets, *context_group, split);
  optim::AdamW opt_full(full->parameters(), {.lr = 1e-2});
  optim::AdamW opt_tp(tp.gpt->parameters(), {.lr = 1e-2});
  for (int step = 0; step < 3; ++step) {
    if (reseed) manual_seed(100 + step);
    const StepResult expected = reference_step(full, opt_full, idx, targets);
    if (reseed) manual_seed(100 + step);
    opt_tp.zero_grad();
    Tensor loss = vocab_parallel_cross_entropy(replica->forward(my_idx), my_targets, tensor_group);
    loss.backward();  // DDP averages each slice's gradient over the context group
    const Tensor norm = tp.tp.clip_grad_norm_(0.5);
    opt_tp.step();
    expect_same_step(expected, {mean_over(*context_group, loss), norm.item()}, max_slice_difference(full, tp),
                     world->rank(), step);
  }
}

}  // namespace loom::parallel::testing
