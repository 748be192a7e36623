#include "examples/models/gpt_plans.h"

#include "parallel/tensor_parallel/conjugates.h"
#include "parallel/tensor_parallel/sequence_conjugates.h"

namespace loom::models {

parallel::Plan gpt_tensor_parallel_plan(bool sequence_parallel) {
  using parallel::colwise, parallel::rowwise, parallel::vocab_parallel, parallel::TokenLayout;
  const TokenLayout tokens = sequence_parallel ? TokenLayout::kSequenceSharded : TokenLayout::kReplicated;
  // Norms, dropouts and positions: on the rank's tokens, or whole.
  const parallel::ParallelStyle between = sequence_parallel ? parallel::sequence_parallel() : parallel::replicate();
  return {
      {"wte", vocab_parallel({.output = tokens})},
      {"wpe", between},
      {"dropout", between},
      {"blocks.*.ln1", between},
      {"blocks.*.attn.qkv", colwise({.parts = 3, .input = tokens})},  // q, k, v: each rank its heads of each
      {"blocks.*.attn.proj", rowwise({.output = tokens})},
      {"blocks.*.attn.dropout", between},
      {"blocks.*.ln2", between},
      {"blocks.*.fc", colwise({.input = tokens})},
      {"blocks.*.proj", rowwise({.output = tokens})},
      {"blocks.*.dropout", between},
      {"ln_f", between},
      {"head", colwise({.input = tokens})},  // logits split along the vocabulary
  };
}

parallel::ContextParallelOptions gpt_context_parallel(parallel::ContextParallelOptions options) {
  options.positions = "wpe";
  return options;
}

int64_t sequence_multiple(const GptLayout& layout) {
  int64_t multiple = 1;
  if (layout.tensor && layout.sequence_parallel) multiple *= layout.tensor->size();
  if (layout.context) multiple *= (layout.split == parallel::SequenceSplit::kZigZag ? 2 : 1) * layout.context->size();
  return multiple;
}

Tensor whole_logits(GPTImpl& gpt, const GptLayout& layout, const Tensor& idx) {
  Tensor logits = gpt.forward(layout.context ? parallel::shard_sequence(idx, *layout.context, layout.split) : idx);
  if (layout.tensor) logits = parallel::gather_from_tensor_parallel(logits, layout.tensor);
  if (layout.context)
    logits = parallel::in_sequence_order(parallel::gather_from_sequence_parallel(logits, layout.context, 1),
                                         *layout.context, layout.split, 1);
  return logits;
}

Tensor generate(GPTImpl& gpt, const GptLayout& layout, Tensor idx, int64_t count, double temperature,
                Generator* generator, int64_t drawn) {
  return generate_with([&](const Tensor& window) { return whole_logits(gpt, layout, window); }, std::move(idx), count,
                       gpt.config.block_size, temperature, generator ? *generator : default_generator(),
                       sequence_multiple(layout), drawn);
}

}  // namespace loom::models
