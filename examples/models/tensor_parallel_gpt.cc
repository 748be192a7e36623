#include "examples/models/tensor_parallel_gpt.h"

#include <algorithm>

#include "parallel/context_parallel/sequence_split.h"
#include "parallel/tensor_parallel/conjugates.h"
#include "tensor/error.h"

namespace loom::models {

namespace {

// A replicated module takes the full model's values as they are.
void copy_module(nn::Module& mine, const nn::Module& full) { mine.load_state_dict(full.state_dict()); }

// Sum of squares of the gradients, as a (1) float64 tensor.
Tensor squared_norm(const TensorList& params, Device device) {
  Tensor total = zeros({1}, {.dtype = kFloat64, .device = device});
  for (const Tensor& p : params)
    if (p.grad().defined()) total = total + sum(square(p.grad().to(kFloat64))).reshape({1});
  return total;
}

}  // namespace

TensorParallelBlockImpl::TensorParallelBlockImpl(const GPTConfig& c, std::shared_ptr<parallel::ProcessGroup> group,
                                                 parallel::TokenLayout tokens)
    : Module("TensorParallelBlock"), group_(std::move(group)), tokens_(tokens) {
  const int64_t d = c.n_embd;
  ln1 = register_module("ln1", nn::LayerNorm(d));
  attn = register_module("attn", parallel::ParallelSelfAttention(d, c.n_head, group_, c.dropout, tokens));
  ln2 = register_module("ln2", nn::LayerNorm(d));
  fc = register_module("fc", parallel::ColumnParallelLinear(d, 4 * d, group_, /*bias=*/true,
                                                                       /*gather_output=*/false, tokens));
  proj = register_module("proj", parallel::RowParallelLinear(4 * d, d, group_, /*bias=*/true, tokens));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

Tensor TensorParallelBlockImpl::forward(const Tensor& x) {
  Tensor h = x + attn->forward(parallel::layer_norm_on(*ln1, x, tokens_, group_));
  Tensor mlp_in = parallel::layer_norm_on(*ln2, h, tokens_, group_);
  return h + parallel::dropout_on(*dropout, proj->forward(gelu(fc->forward(mlp_in), GeluApproximation::Tanh)), tokens_,
                                  *group_);
}

void TensorParallelBlockImpl::load_from(const BlockImpl& full) {
  copy_module(*ln1, *full.ln1);
  copy_module(*ln2, *full.ln2);
  attn->load_from(*full.attn);
  fc->load_from(*full.fc);
  proj->load_from(*full.proj);
}

TensorParallelGPTImpl::TensorParallelGPTImpl(const GPTConfig& c, std::shared_ptr<parallel::ProcessGroup> group,
                                             parallel::TokenLayout tokens)
    : Module("TensorParallelGPT"), config(c), group_(std::move(group)), tokens_(tokens) {
  LOOM_CHECK(group_ != nullptr, "TensorParallelGPT: no process group");
  LOOM_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_embd % c.n_head == 0,
             "TensorParallelGPT: invalid config (vocab ", c.vocab_size, ", heads ", c.n_head, ", embd ", c.n_embd, ")");
  LOOM_CHECK(tokens != parallel::TokenLayout::kSequenceSharded || c.block_size % group_->size() == 0,
             "TensorParallelGPT: sequence parallel over ", group_->size(), " ranks needs a block_size that divides by ",
             "them, got ", c.block_size);
  wte = register_module("wte", parallel::VocabParallelEmbedding(c.vocab_size, c.n_embd, group_, tokens));
  wpe = register_module("wpe", nn::Embedding(c.block_size, c.n_embd));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
  blocks = register_module("blocks", nn::ModuleList());
  for (int64_t l = 0; l < c.n_layer; ++l) blocks->push_back(TensorParallelBlock(c, group_, tokens));
  ln_f = register_module("ln_f", nn::LayerNorm(c.n_embd));
  head = register_module("head",
                         parallel::ColumnParallelLinear(c.n_embd, c.vocab_size, group_, /*bias=*/false, false, tokens));
}

Tensor TensorParallelGPTImpl::forward(const Tensor& idx) {
  LOOM_CHECK(idx.dim() == 2 && idx.size(1) <= config.block_size,
             "TensorParallelGPT: expected token ids (B, T) with T <= ", config.block_size, ", got shape ", idx.shape());
  parallel::check_ranks_draw_alike("TensorParallelGPT", is_training() ? config.dropout : 0, *group_);
  Tensor x;
  if (tokens_ == parallel::TokenLayout::kReplicated) {
    x = wte->forward(idx) + wpe->forward(arange(idx.size(1), {.dtype = kInt64, .device = idx.device()}));
  } else {  // this rank's tokens, and their positions' rows
    const int64_t t = idx.size(1), n = group_->size(), piece = t / n;
    LOOM_CHECK(t % n == 0, "TensorParallelGPT: sequence parallel over ", n, " ranks needs a sequence length that ",
               "divides by them, got ", t);
    const Tensor positions =
        parallel::sequence_positions(piece, *group_, parallel::SequenceSplit::kContiguous, idx.device());
    x = wte->forward(idx) + nn::functional::embedding(positions, parallel::copy_to_tensor_parallel(wpe->weight, group_));
  }
  x = parallel::dropout_on(*dropout, x, tokens_, *group_);
  for (size_t l = 0; l < blocks->size(); ++l) x = (*blocks)[l]->forward(x);
  return head->forward(parallel::layer_norm_on(*ln_f, x, tokens_, group_));
}

Tensor TensorParallelGPTImpl::full_logits(const Tensor& idx) {
  return parallel::gather_from_tensor_parallel(forward(idx), group_);
}

Tensor TensorParallelGPTImpl::loss(const Tensor& idx, const Tensor& targets) {
  return parallel::vocab_parallel_cross_entropy(forward(idx), targets, group_);
}

Tensor TensorParallelGPTImpl::generate(Tensor idx, int64_t count, double temperature, Generator* generator,
                                       int64_t drawn) {
  NoGradGuard no_grad;
  Generator& gen = generator ? *generator : default_generator();
  const int64_t n = tokens_ == parallel::TokenLayout::kSequenceSharded ? group_->size() : 1;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = idx.size(1), start = std::max<int64_t>(0, t - config.block_size), length = t - start;
    // Sequence parallel: padded at the end to a multiple of the ranks (fits, as block_size divides by
    // them); causal attention keeps the padding out of the last real token's logits.
    Tensor window = idx.narrow(1, start, length);
    if (length % n != 0) window = cat({window, zeros({1, n - length % n}, {.dtype = kInt64, .device = idx.device()})}, 1);
    Tensor logits = full_logits(window).select(0, 0).select(0, length - 1);
    if (drawn > 0) logits = logits.narrow(0, 0, drawn);
    const int64_t next = sample_token(logits, temperature, gen);  // every rank draws the same
    idx = cat({idx, full({1, 1}, static_cast<double>(next), {.dtype = kInt64, .device = idx.device()})}, 1);
  }
  return idx;
}

void TensorParallelGPTImpl::load_from(const GPTImpl& full) {
  LOOM_CHECK(full.config.vocab_size == config.vocab_size && full.config.n_layer == config.n_layer &&
                 full.config.n_embd == config.n_embd && full.config.n_head == config.n_head &&
                 full.config.block_size == config.block_size,
             "TensorParallelGPT::load_from: the full GPT has another shape");
  wte->load_from(*full.wte);
  copy_module(*wpe, *full.wpe);
  for (size_t l = 0; l < blocks->size(); ++l)
    blocks->at<TensorParallelBlockImpl>(l)->load_from(*full.blocks->at<BlockImpl>(l));
  copy_module(*ln_f, *full.ln_f);
  head->load_from(*full.head);
}

TensorList TensorParallelGPTImpl::sharded_parameters() const {
  TensorList out{wte->weight};
  for (size_t l = 0; l < blocks->size(); ++l) {
    auto b = blocks->at<TensorParallelBlockImpl>(l);
    for (const Tensor& t : {b->attn->qkv->weight, b->attn->qkv->bias, b->attn->proj->weight, b->fc->weight,
                            b->fc->bias, b->proj->weight})
      out.push_back(t);
  }
  out.push_back(head->weight);
  return out;
}

TensorList TensorParallelGPTImpl::replicated_parameters() const {
  const TensorList sharded = sharded_parameters();
  TensorList out;
  for (const Tensor& p : parameters())
    if (std::none_of(sharded.begin(), sharded.end(), [&](const Tensor& s) { return s.is_same(p); })) out.push_back(p);
  return out;
}

Tensor TensorParallelGPTImpl::clip_grad_norm_(double max_norm) {
  NoGradGuard no_grad;
  const Device device = head->weight.device();
  Tensor sharded = squared_norm(sharded_parameters(), device).contiguous();
  group_->all_reduce(sharded, parallel::ReduceOp::Sum)->wait();
  Tensor total = sqrt(sum(sharded + squared_norm(replicated_parameters(), device)));
  Tensor scale = clamp(max_norm / (total + 1e-6), 0, 1);
  for (const Tensor& p : parameters())
    if (p.grad().defined()) p.grad().mul_(scale.to(p.grad().device(), p.grad().dtype()));
  return total;
}

}  // namespace loom::models
