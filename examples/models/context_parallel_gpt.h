// models::GPT in context parallel over the ranks of a group: each rank runs
// the whole model on its 1/N of every sequence's tokens, at the positions
// they hold in the sequence (dealt contiguously or zig-zag,
// parallel/context_parallel/sequence_split.h), and attention gets the other
// ranks' keys and values all at once (KeyValueExchange::kAllGather,
// parallel/context_parallel/attention.h) or a block at a time round a ring
// (kRing, parallel/context_parallel/ring_attention.h). The weights are the GPT's
// own, the same on every rank, so their gradients are averaged over the
// group as in data parallelism: wrap this in DistributedDataParallel.
//
//   models::GPT gpt(config);                               // the same seed on every rank
//   models::ContextParallelGPT cp(gpt, group, SequenceSplit::kZigZag);   // runs gpt's own modules
//   parallel::DistributedDataParallel ddp(cp, group);
//   Tensor logits = ddp->forward(parallel::shard_sequence(idx, *group, SequenceSplit::kZigZag));  // (B, T/N, vocab)
//   cross_entropy(logits, the same shard of targets).backward();   // the ranks' mean: the whole sequence's loss
#pragma once

#include <memory>

#include "examples/models/models.h"
#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::models {

class ContextParallelGPTImpl : public nn::Module {
 public:
  ContextParallelGPTImpl(GPT gpt, std::shared_ptr<parallel::ProcessGroup> group,
                         parallel::SequenceSplit split = parallel::SequenceSplit::kContiguous,
                         parallel::KeyValueExchange exchange = parallel::KeyValueExchange::kAllGather);
  // idx (B, T/N): this rank's tokens of each sequence (shard_sequence) -> their logits (B, T/N, vocab).
  Tensor forward(const Tensor& idx) override;

  GPT gpt{nullptr};

 private:
  // A block, its attention run over the ranks' tokens.
  Tensor block_forward(BlockImpl& block, const Tensor& x);

  std::shared_ptr<parallel::ProcessGroup> group_;
  parallel::SequenceSplit split_;
  parallel::KeyValueExchange exchange_;
};
LOOM_MODULE(ContextParallelGPT);

}  // namespace loom::models
