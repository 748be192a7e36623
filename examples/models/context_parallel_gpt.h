// A GPT in context parallel: each rank runs the model on its 1/N of every
// sequence's tokens, at the positions they hold in the sequence (dealt
// contiguously or zig-zag, parallel/context_parallel/sequence_split.h), and
// attention gets the other ranks' keys and values all at once
// (KeyValueExchange::kAllGather, parallel/context_parallel/attention.h) or
// a block at a time round a ring (kRing,
// parallel/context_parallel/ring_attention.h), or trades the token split for
// a head split around attention (kAllToAll, Ulysses,
// parallel/context_parallel/ulysses_attention.h). Two models:
//
// ContextParallelGPT runs a models::GPT. Its weights are the GPT's own, the
// same on every rank, so their gradients are averaged over the group as in
// data parallelism: wrap it in DistributedDataParallel.
//
//   models::GPT gpt(config);                               // the same seed on every rank
//   models::ContextParallelGPT cp(gpt, group, SequenceSplit::kZigZag);   // runs gpt's own modules
//   parallel::DistributedDataParallel ddp(cp, group);
//   Tensor logits = ddp->forward(parallel::shard_sequence(idx, *group, SequenceSplit::kZigZag));  // (B, T/N, vocab)
//   cross_entropy(logits, the same shard of targets).backward();   // the ranks' mean: the whole sequence's loss
//
// ContextTensorParallelGPT runs a models::TensorParallelGPT's slices (1/T
// of every block's heads and MLP, and of the vocabulary, over its "tensor"
// group) on a rank's 1/C of every sequence (over a "context" group): tensor
// and context parallel at once, on a C x T mesh. Attention is where the two
// meet: a rank's heads' keys and values travel between the ranks that hold
// the same heads, its context group; the tensor-parallel all-reduces stay
// inside the tensor group, on the rank's tokens.
//
//   DeviceMesh mesh(world, {{"context", 2}, {"tensor", 2}});     // 4 ranks
//   models::TensorParallelGPT tp(config, mesh.group("tensor"));
//   tp->load_from(*full);                                        // this rank's slices
//   models::ContextTensorParallelGPT cp_tp(tp, mesh.group("context"), SequenceSplit::kZigZag);
//   parallel::DistributedDataParallel ddp(cp_tp, mesh.group("context"));  // the ranks with the same slices
//   Tensor logits = ddp->forward(shard_sequence(idx, *mesh.group("context"), kZigZag));  // (B, T/C, vocab/T)
//   vocab_parallel_cross_entropy(logits, the same shard of targets, mesh.group("tensor")).backward();
//
// Each rank's loss is the mean over its tokens, so averaging every slice's
// gradient over the context group (DDP) gives the whole sequence's; with
// data parallelism too, over the ranks that hold the same slices in every
// replica. The tensor-parallel model must replicate its tokens
// (TokenLayout::kReplicated): they are already the context group's share.
#pragma once

#include <memory>

#include "examples/models/models.h"
#include "examples/models/tensor_parallel_gpt.h"
#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::models {

// How a model runs over its context group.
struct ContextParallelPlan {
  std::shared_ptr<parallel::ProcessGroup> group;
  parallel::SequenceSplit split = parallel::SequenceSplit::kContiguous;
  parallel::KeyValueExchange exchange = parallel::KeyValueExchange::kAllGather;
};

class ContextParallelGPTImpl : public nn::Module {
 public:
  ContextParallelGPTImpl(GPT gpt, std::shared_ptr<parallel::ProcessGroup> group,
                         parallel::SequenceSplit split = parallel::SequenceSplit::kContiguous,
                         parallel::KeyValueExchange exchange = parallel::KeyValueExchange::kAllGather);
  // idx (B, T/N): this rank's tokens of each sequence (shard_sequence) -> their logits (B, T/N, vocab).
  Tensor forward(const Tensor& idx) override;

  GPT gpt{nullptr};

 private:
  ContextParallelPlan plan_;
};
LOOM_MODULE(ContextParallelGPT);

class ContextTensorParallelGPTImpl : public nn::Module {
 public:
  ContextTensorParallelGPTImpl(TensorParallelGPT tp, std::shared_ptr<parallel::ProcessGroup> context,
                               parallel::SequenceSplit split = parallel::SequenceSplit::kContiguous,
                               parallel::KeyValueExchange exchange = parallel::KeyValueExchange::kAllGather);
  // idx (B, T/C): this rank's tokens of each sequence -> their logits for its
  // slice of the vocabulary (B, T/C, vocab/T), for vocab_parallel_cross_entropy.
  Tensor forward(const Tensor& idx) override;

  TensorParallelGPT tp{nullptr};

 private:
  ContextParallelPlan plan_;
};
LOOM_MODULE(ContextTensorParallelGPT);

}  // namespace loom::models
