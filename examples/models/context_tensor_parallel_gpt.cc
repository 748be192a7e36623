#include "examples/models/context_tensor_parallel_gpt.h"

#include "tensor/error.h"

namespace loom::models {

ContextTensorParallelGPTImpl::ContextTensorParallelGPTImpl(TensorParallelGPT tp_in,
                                                           std::shared_ptr<parallel::ProcessGroup> context,
                                                           parallel::SequenceSplit split,
                                                           parallel::KeyValueExchange exchange)
    : Module("ContextTensorParallelGPT"), context_(std::move(context)), split_(split), exchange_(exchange) {
  LOOM_CHECK(context_ != nullptr, "ContextTensorParallelGPT: no context process group");
  LOOM_CHECK(tp_in->tokens() == parallel::TokenLayout::kReplicated,
             "ContextTensorParallelGPT: the tensor-parallel GPT must replicate its tokens (TokenLayout::kReplicated); "
             "context parallelism already gives each rank its share of the sequence");
  tp = register_module("tp", std::move(tp_in));
}

Tensor ContextTensorParallelGPTImpl::forward(const Tensor& idx) {
  const GPTConfig& c = tp->config;
  const int64_t piece = idx.dim() == 2 ? idx.size(1) : 0;
  LOOM_CHECK(idx.dim() == 2 && piece * context_->size() <= c.block_size, "ContextTensorParallelGPT: expected this ",
             "rank's tokens (B, T/C) of sequences of T <= ", c.block_size, " over ", context_->size(),
             " context ranks, got shape ", idx.shape());
  const double p = is_training() ? c.dropout : 0;
  parallel::check_ranks_draw_alike("ContextTensorParallelGPT", p, *context_);
  parallel::check_ranks_draw_alike("ContextTensorParallelGPT", p, *tp->group());
  const Tensor positions = parallel::sequence_positions(piece, *context_, split_, idx.device());
  Tensor x = parallel::dropout_on_shard(*tp->dropout, tp->wte->forward(idx) + tp->wpe->forward(positions), *context_,
                                        split_);
  for (size_t l = 0; l < tp->blocks->size(); ++l) x = block_forward(*tp->blocks->at<TensorParallelBlockImpl>(l), x);
  return tp->head->forward(tp->ln_f->forward(x));
}

Tensor ContextTensorParallelGPTImpl::block_forward(TensorParallelBlockImpl& block, const Tensor& x) {
  parallel::ParallelSelfAttentionImpl& attn = *block.attn;
  // This rank's heads (column-parallel q, k, v), attended over the context group, then row-parallel out.
  const Tensor y = parallel::context_parallel_self_attention(attn.qkv->forward(block.ln1->forward(x)),
                                                             attn.local_heads(), context_, split_, exchange_);
  Tensor h = x + parallel::dropout_on_shard(*attn.dropout, attn.proj->forward(y), *context_, split_);
  Tensor mlp = block.proj->forward(gelu(block.fc->forward(block.ln2->forward(h)), GeluApproximation::Tanh));
  return h + parallel::dropout_on_shard(*block.dropout, mlp, *context_, split_);
}

}  // namespace loom::models
