#include "examples/models/context_parallel_gpt.h"

#include "parallel/context_parallel/attention.h"
#include "tensor/error.h"

namespace loom::models {

ContextParallelGPTImpl::ContextParallelGPTImpl(GPT gpt_in, std::shared_ptr<parallel::ProcessGroup> group,
                                               parallel::SequenceSplit split, parallel::KeyValueExchange exchange)
    : Module("ContextParallelGPT"), group_(std::move(group)), split_(split), exchange_(exchange) {
  LOOM_CHECK(group_ != nullptr, "ContextParallelGPT: no process group");
  gpt = register_module("gpt", std::move(gpt_in));
}

Tensor ContextParallelGPTImpl::forward(const Tensor& idx) {
  const GPTConfig& c = gpt->config;
  const int64_t piece = idx.dim() == 2 ? idx.size(1) : 0;
  LOOM_CHECK(idx.dim() == 2 && piece * group_->size() <= c.block_size, "ContextParallelGPT: expected this rank's ",
             "tokens (B, T/N) of sequences of T <= ", c.block_size, " over ", group_->size(), " ranks, got shape ",
             idx.shape());
  parallel::check_ranks_draw_alike("ContextParallelGPT", is_training() ? c.dropout : 0, *group_);
  const Tensor positions = parallel::sequence_positions(piece, *group_, split_, idx.device());
  Tensor x = parallel::dropout_on_shard(*gpt->dropout, gpt->wte->forward(idx) + gpt->wpe->forward(positions), *group_,
                                        split_);
  for (size_t l = 0; l < gpt->blocks->size(); ++l) x = block_forward(*gpt->blocks->at<BlockImpl>(l), x);
  return gpt->head->forward(gpt->ln_f->forward(x));
}

Tensor ContextParallelGPTImpl::block_forward(BlockImpl& block, const Tensor& x) {
  nn::CausalSelfAttentionImpl& attn = *block.attn;
  const Tensor y = parallel::context_parallel_self_attention(attn.qkv->forward(block.ln1->forward(x)),
                                                             attn.options.num_heads, group_, split_, exchange_);
  Tensor h = x + parallel::dropout_on_shard(*attn.dropout, attn.proj->forward(y), *group_, split_);
  Tensor mlp = block.proj->forward(gelu(block.fc->forward(block.ln2->forward(h)), GeluApproximation::Tanh));
  return h + parallel::dropout_on_shard(*block.dropout, mlp, *group_, split_);
}

}  // namespace loom::models
