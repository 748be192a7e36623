// Context parallelism applied to a model as it is written: every rank runs
// the model's own forward on its 1/N of every sequence's tokens
// (shard_sequence), and context_parallel() makes the parts that need the
// whole sequence work on those shares (torchtitan's context_parallel):
//
//   attention   each nn::CausalSelfAttention attends with its rank's queries to
//               every rank's keys and values before them, exchanged as
//               `exchange` says (attention.h: all-gather, ring or all-to-all)
//   dropout     each nn::Dropout draws the whole sequence's mask and keeps its
//               tokens' part, so the model drops what it would on one device
//   positions   the Embedding named `positions` (a GPT's "wpe"), called with
//               places 0..T/N-1, looks up the places those tokens hold in the
//               sequence
//
//   models::GPT gpt(config);                              // the same seed on every rank
//   parallel::context_parallel(*gpt, group, {.split = SequenceSplit::kZigZag, .positions = "wpe"});
//   parallel::DistributedDataParallel ddp(gpt, group);    // the weights are whole: average their gradients
//   Tensor logits = ddp->forward(shard_sequence(idx, *group, SequenceSplit::kZigZag));     // (B, T/N, vocab)
//   cross_entropy(logits, the same shard of targets).backward();   // the ranks' mean: the whole sequence's loss
//
// With tensor parallelism too, parallelize() the model over its tensor group
// first (tokens replicated: they are already the context group's share),
// then context_parallel() it over the context group; attention's keys and
// values then travel between the ranks that hold the same heads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::parallel {

struct ContextParallelOptions {
  SequenceSplit split = SequenceSplit::kContiguous;  // how shard_sequence dealt the tokens
  KeyValueExchange exchange = KeyValueExchange::kAllGather;
  std::string positions{};  // the position Embedding's name, if the model has one
};

// Applies context parallelism over `group` to every attention and dropout
// module of `model` (and its position embedding); returns their names. A
// model without nn::CausalSelfAttention, a `positions` that names no
// Embedding, and a module already made parallel another way (a
// sequence-parallel dropout) are errors.
std::vector<std::string> context_parallel(nn::Module& model, std::shared_ptr<ProcessGroup> group,
                                          const ContextParallelOptions& options = {});

}  // namespace loom::parallel
