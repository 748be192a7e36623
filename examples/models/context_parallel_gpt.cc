#include "examples/models/context_parallel_gpt.h"

#include "tensor/error.h"

namespace loom::models {
namespace {

// The checks both models make of this rank's tokens (B, T/N).
void check_shard(const char* model, const Tensor& idx, const GPTConfig& c, const parallel::ProcessGroup& context) {
  LOOM_CHECK(idx.dim() == 2 && idx.size(1) * context.size() <= c.block_size, model, ": expected this rank's tokens ",
             "(B, T/N) of sequences of T <= ", c.block_size, " over ", context.size(), " context ranks, got shape ",
             idx.shape());
}

// A GPT's forward on this rank's tokens: each at its place in the sequence,
// dropout with the whole sequence's masks, and attention over the context
// group with the rank's `heads`. GPTImpl and TensorParallelGPTImpl name
// their parts alike, so this one body runs both (in tensor parallel the
// projections are the rank's slices and carry their own all-reduces).
template <typename Block, typename Gpt>
Tensor forward_on_shard(Gpt& gpt, int64_t heads, const Tensor& idx, const ContextParallelPlan& plan) {
  auto dropout = [&](nn::DropoutImpl& d, const Tensor& x) {
    return parallel::dropout_on_shard(d, x, *plan.group, plan.split);
  };
  const Tensor positions = parallel::sequence_positions(idx.size(1), *plan.group, plan.split, idx.device());
  Tensor x = dropout(*gpt.dropout, gpt.wte->forward(idx) + gpt.wpe->forward(positions));
  for (size_t l = 0; l < gpt.blocks->size(); ++l) {
    auto* own = dynamic_cast<Block*>((*gpt.blocks)[l].get());
    LOOM_CHECK(own != nullptr, "context parallelism runs each block's layers itself, so block ", l, " must be the ",
               "model's own, not a ", (*gpt.blocks)[l]->type_name(), " (with FSDP, wrap the whole model as one unit: ",
               "no wrap policy)");
    Block& block = *own;
    const Tensor y = parallel::context_parallel_self_attention(block.attn->qkv->forward(block.ln1->forward(x)), heads,
                                                               plan.group, plan.split, plan.exchange);
    const Tensor h = x + dropout(*block.attn->dropout, block.attn->proj->forward(y));
    const Tensor mlp = block.proj->forward(gelu(block.fc->forward(block.ln2->forward(h)), GeluApproximation::Tanh));
    x = h + dropout(*block.dropout, mlp);
  }
  return gpt.head->forward(gpt.ln_f->forward(x));
}

}  // namespace

ContextParallelGPTImpl::ContextParallelGPTImpl(GPT gpt_in, std::shared_ptr<parallel::ProcessGroup> group,
                                               parallel::SequenceSplit split, parallel::KeyValueExchange exchange)
    : Module("ContextParallelGPT"), plan_{std::move(group), split, exchange} {
  LOOM_CHECK(plan_.group != nullptr, "ContextParallelGPT: no process group");
  gpt = register_module("gpt", std::move(gpt_in));
}

Tensor ContextParallelGPTImpl::forward(const Tensor& idx) {
  check_shard("ContextParallelGPT", idx, gpt->config, *plan_.group);
  parallel::check_ranks_draw_alike("ContextParallelGPT", is_training() ? gpt->config.dropout : 0, *plan_.group);
  return forward_on_shard<BlockImpl>(*gpt, gpt->config.n_head, idx, plan_);
}

ContextTensorParallelGPTImpl::ContextTensorParallelGPTImpl(TensorParallelGPT tp_in,
                                                           std::shared_ptr<parallel::ProcessGroup> context,
                                                           parallel::SequenceSplit split,
                                                           parallel::KeyValueExchange exchange)
    : Module("ContextTensorParallelGPT"), plan_{std::move(context), split, exchange} {
  LOOM_CHECK(plan_.group != nullptr, "ContextTensorParallelGPT: no context process group");
  LOOM_CHECK(tp_in->tokens() == parallel::TokenLayout::kReplicated,
             "ContextTensorParallelGPT: the tensor-parallel GPT must replicate its tokens (TokenLayout::kReplicated); "
             "context parallelism already gives each rank its share of the sequence");
  tp = register_module("tp", std::move(tp_in));
}

Tensor ContextTensorParallelGPTImpl::forward(const Tensor& idx) {
  check_shard("ContextTensorParallelGPT", idx, tp->config, *plan_.group);
  const double p = is_training() ? tp->config.dropout : 0;
  parallel::check_ranks_draw_alike("ContextTensorParallelGPT", p, *plan_.group);
  parallel::check_ranks_draw_alike("ContextTensorParallelGPT", p, *tp->group());
  return forward_on_shard<TensorParallelBlockImpl>(*tp, tp->config.n_head / tp->group()->size(), idx, plan_);
}

}  // namespace loom::models
