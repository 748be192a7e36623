// The context-parallel checks every backend runs (context_parallel_test.cc
// over threads, context_parallel_mpi_test.cc under mpirun): the GPT with
// each rank on its 1/N of every sequence's tokens, DDP averaging the
// weights' gradients, against the same GPT on the whole sequences.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "examples/models/context_parallel_gpt.h"
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
  models::ContextParallelGPT cp(copy, group, split, exchange);
  DistributedDataParallel replica(cp, group);
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
}

}  // namespace loom::parallel::testing
