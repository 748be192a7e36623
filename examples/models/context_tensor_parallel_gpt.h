// A GPT in tensor and context parallel at once, over two groups of a mesh:
// models::TensorParallelGPT's slices (1/T of every block's heads and MLP,
// and of the vocabulary, over the "tensor" group), each run on its 1/C of
// every sequence's tokens (over the "context" group, dealt as `split`
// says). Attention is where the two meet: a rank's heads' keys and values
// travel between the ranks that hold the same heads, its context group
// (parallel/context_parallel/attention.h); the tensor-parallel all-reduces
// stay inside the tensor group, on the rank's tokens.
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

#include "examples/models/tensor_parallel_gpt.h"
#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/attention.h"
#include "parallel/context_parallel/sequence_split.h"

namespace loom::models {

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
  // A block: the tensor-parallel layers on this rank's tokens, attention over the context group.
  Tensor block_forward(TensorParallelBlockImpl& block, const Tensor& x);

  std::shared_ptr<parallel::ProcessGroup> context_;
  parallel::SequenceSplit split_;
  parallel::KeyValueExchange exchange_;
};
LOOM_MODULE(ContextTensorParallelGPT);

}  // namespace loom::models
