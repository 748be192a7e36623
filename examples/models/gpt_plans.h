// How models::GPT is made parallel: its plan for tensor (and sequence)
// parallelism, the options for context parallelism, and the whole logits of
// a GPT so made, for evaluation and sampling. The model itself is
// unchanged; parallel/parallelize.h and
// parallel/context_parallel/context_parallel.h do the rest.
//
//   DeviceMesh mesh(world, {{"data", 2}, {"context", 2}, {"tensor", 2}});
//   models::GPT gpt(config);                                    // the same seed on every rank
//   parallel::TensorParallel tp =
//       parallel::parallelize(*gpt, mesh.group("tensor"), models::gpt_tensor_parallel_plan());
//   parallel::context_parallel(*gpt, mesh.group("context"), models::gpt_context_parallel({.split = kZigZag}));
//   parallel::DistributedDataParallel ddp(gpt, mesh.group({"data", "context"}));   // the same slices
#pragma once

#include <memory>

#include "examples/models/models.h"
#include "parallel/comm/process_group.h"
#include "parallel/context_parallel/context_parallel.h"
#include "parallel/parallelize.h"

namespace loom::models {

// Megatron-LM's layout: each block's heads and MLP width, the token
// embedding's vocabulary and the head's output vocabulary split over the
// ranks; norms, dropouts and positions whole. With `sequence_parallel`
// those run on 1/N of the tokens each (Korthikanti et al.): the sequence
// must divide by the ranks.
parallel::Plan gpt_tensor_parallel_plan(bool sequence_parallel = false);

// Context parallelism as `options` says, with the GPT's position embedding ("wpe").
parallel::ContextParallelOptions gpt_context_parallel(parallel::ContextParallelOptions options = {});

// How a GPT lies over the ranks once made parallel by the two above.
struct GptLayout {
  std::shared_ptr<parallel::ProcessGroup> tensor{};  // null: not tensor parallel
  bool sequence_parallel = false;
  std::shared_ptr<parallel::ProcessGroup> context{};  // null: not context parallel
  parallel::SequenceSplit split = parallel::SequenceSplit::kContiguous;
};

// What a whole sequence's length must be a multiple of, to be cut over the ranks.
int64_t sequence_multiple(const GptLayout& layout);

// The logits (B, T, vocab) of whole sequences idx (B, T), on every rank:
// each rank runs its share of the sequence (context parallel), the
// vocabulary's slices are gathered (tensor parallel) and the sequence put
// back together. For evaluation and sampling; training uses the split
// logits (vocab_parallel_cross_entropy).
Tensor whole_logits(GPTImpl& gpt, const GptLayout& layout, const Tensor& idx);

// GPTImpl::generate for a GPT so made parallel: every rank draws the same
// tokens. `drawn`: only the first `drawn` tokens of the vocabulary are
// drawn (0: all), for a vocabulary padded to a multiple of the ranks.
Tensor generate(GPTImpl& gpt, const GptLayout& layout, Tensor idx, int64_t count, double temperature = 1.0,
                Generator* generator = nullptr, int64_t drawn = 0);

}  // namespace loom::models
