#include "parallel/tensor_parallel/layers.h"

#include <cmath>

#include "nn/init.h"
#include "parallel/context_parallel/sequence_split.h"
#include "parallel/tensor_parallel/conjugates.h"
#include "parallel/tensor_parallel/sequence_conjugates.h"
#include "tensor/autocast.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace F = nn::functional;

int64_t per_rank(int64_t total, const ProcessGroup& group, const char* what) {
  LOOM_CHECK(total % group.size() == 0, "tensor parallel: ", what, " (", total, ") does not divide by the ",
             group.size(), " ranks");
  return total / group.size();
}

namespace {

// PyTorch's Linear initialisation, over the full layer's fan-in.
void init_like_linear(const Tensor& weight, const Tensor& bias, int64_t fan_in) {
  const double bound = 1 / std::sqrt(static_cast<double>(fan_in));
  nn::init::uniform_(weight, -bound, bound);
  if (bias.defined()) nn::init::uniform_(bias, -bound, bound);
}

void copy_into(const Tensor& dst, const Tensor& src, const char* what) {
  LOOM_CHECK(dst.shape() == src.shape(), "tensor parallel load_from: ", what, " is ", src.shape(), ", this rank's ",
             dst.shape());
  NoGradGuard no_grad;
  dst.copy_(src);
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<ProcessGroup> group,
                                                   bool bias, bool gather_output, TokenLayout input)
    : Module("ColumnParallelLinear"), group_(std::move(group)), gather_output_(gather_output), input_(input) {
  const int64_t local = per_rank(out, *group_, "a column-parallel layer's output features");
  weight = register_parameter("weight", empty({local, in}));
  if (bias) this->bias = register_parameter("bias", empty({local}));
  init_like_linear(weight, this->bias, in);
}

Tensor column_parallel_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                              const std::shared_ptr<ProcessGroup>& group, TokenLayout input, bool gather_output) {
  Tensor y = input == TokenLayout::kSequenceSharded ? gather_sequence_linear(x, weight, bias, group)
                                                   : F::linear(copy_to_tensor_parallel(x, group), weight, bias);
  return gather_output ? gather_from_tensor_parallel(y, group) : y;
}

Tensor column_slice(const Tensor& full, int parts, const ProcessGroup& group) {
  const int64_t block = full.size(0) / parts, local = block / group.size(), r = group.rank();
  TensorList rows;
  for (int p = 0; p < parts; ++p) rows.push_back(full.narrow(0, p * block + r * local, local));
  return cat(rows, 0);
}

Tensor ColumnParallelLinearImpl::forward(const Tensor& x) {
  return column_parallel_linear(x, weight, bias, group_, input_, gather_output_);
}

void ColumnParallelLinearImpl::load_from(const nn::LinearImpl& full) { load_from(full, 1); }

void ColumnParallelLinearImpl::load_from(const nn::LinearImpl& full, int parts) {
  copy_into(weight, column_slice(full.weight, parts, *group_), "the weight's rows");
  if (bias.defined()) copy_into(bias, column_slice(full.bias, parts, *group_), "the bias");
}

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, std::shared_ptr<ProcessGroup> group, bool bias,
                                             TokenLayout output)
    : Module("RowParallelLinear"), group_(std::move(group)), output_(output) {
  const int64_t local = per_rank(in, *group_, "a row-parallel layer's input features");
  weight = register_parameter("weight", empty({out, local}));
  if (bias) this->bias = register_parameter("bias", empty({out}));
  init_like_linear(weight, this->bias, in);
}

Tensor row_parallel_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const std::shared_ptr<ProcessGroup>& group, TokenLayout output) {
  if (output == TokenLayout::kReplicated) {
    Tensor y = reduce_from_tensor_parallel(F::linear(x, weight), group);
    return bias.defined() ? y + bias : y;
  }
  Tensor y = reduce_scatter_to_sequence_parallel(F::linear(x, weight), group);
  return bias.defined() ? y + copy_to_tensor_parallel(bias, group) : y;
}

Tensor row_slice(const Tensor& full, const ProcessGroup& group) {
  const int64_t local = full.size(1) / group.size();
  return full.narrow(1, group.rank() * local, local);
}

Tensor RowParallelLinearImpl::forward(const Tensor& x) { return row_parallel_linear(x, weight, bias, group_, output_); }

void RowParallelLinearImpl::load_from(const nn::LinearImpl& full) {
  copy_into(weight, row_slice(full.weight, *group_), "the weight's columns");
  if (bias.defined()) copy_into(bias, full.bias, "the bias");
}

ParallelSelfAttentionImpl::ParallelSelfAttentionImpl(int64_t embed_dim, int64_t num_heads,
                                                     std::shared_ptr<ProcessGroup> group, double dropout_p,
                                                     TokenLayout tokens)
    : Module("ParallelSelfAttention"), embed_dim_(embed_dim), group_(group), tokens_(tokens) {
  LOOM_CHECK(num_heads > 0 && embed_dim % num_heads == 0, "ParallelSelfAttention: embed_dim ", embed_dim,
             " does not divide into ", num_heads, " heads");
  local_heads_ = per_rank(num_heads, *group, "the number of attention heads");
  qkv = register_module("qkv", ColumnParallelLinear(embed_dim, 3 * embed_dim, group, /*bias=*/true,
                                                          /*gather_output=*/false, tokens));
  proj = register_module("proj", RowParallelLinear(embed_dim, embed_dim, group, /*bias=*/true, tokens));
  dropout = register_module("dropout", nn::Dropout(dropout_p));
}

Tensor ParallelSelfAttentionImpl::forward(const Tensor& x) {
  LOOM_CHECK(x.dim() == 3 && x.size(2) == embed_dim_, "ParallelSelfAttention: expected input (B, T, ", embed_dim_,
             "), got ", x.shape());
  const Tensor q_k_v = qkv->forward(x);  // (B, T, 3C/N): all T tokens, also when x holds this rank's T/N
  const int64_t b = q_k_v.size(0), t = q_k_v.size(1);
  const int64_t local = qkv->weight.size(0) / 3, d = local / local_heads_;  // this rank's heads' width C/N, one head's
  TensorList parts = split(q_k_v, local, 2);
  auto by_head = [&](const Tensor& z) { return z.reshape({b, t, local_heads_, d}).transpose(1, 2); };
  Tensor y = F::scaled_dot_product_attention(by_head(parts[0]), by_head(parts[1]), by_head(parts[2]), /*causal=*/true);
  y = y.transpose(1, 2).reshape({b, t, local});
  return dropout_on(*dropout, proj->forward(y), tokens_, *group_);
}

void ParallelSelfAttentionImpl::load_from(const nn::CausalSelfAttentionImpl& full) {
  qkv->load_from(*full.qkv, /*parts=*/3);
  proj->load_from(*full.proj);
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t num, int64_t dim, std::shared_ptr<ProcessGroup> group,
                                                       TokenLayout output)
    : Module("VocabParallelEmbedding"), group_(std::move(group)), output_(output) {
  const int64_t local = per_rank(num, *group_, "the vocabulary");
  first = group_->rank() * local;
  weight = register_parameter("weight", empty({local, dim}));
  nn::init::normal_(weight, 0, 1);
}

Tensor vocab_parallel_embedding(const Tensor& indices, const Tensor& weight, const std::shared_ptr<ProcessGroup>& group,
                                TokenLayout output) {
  const int64_t local = weight.size(0), first = group->rank() * local;
  Tensor mine = logical_and(indices >= static_cast<double>(first), indices < static_cast<double>(first + local));
  // Ids of other ranks look up row 0 and are zeroed; the all-reduce adds each id's one real row.
  Tensor local_ids = where(mine, indices - static_cast<double>(first), zeros_like(indices));
  Tensor rows = F::embedding(local_ids, weight) * mine.unsqueeze(mine.dim()).to(weight.dtype());
  return output == TokenLayout::kSequenceSharded ? reduce_scatter_to_sequence_parallel(rows, group)
                                                 : reduce_from_tensor_parallel(rows, group);
}

Tensor VocabParallelEmbeddingImpl::forward(const Tensor& indices) {
  return vocab_parallel_embedding(indices, weight, group_, output_);
}

void VocabParallelEmbeddingImpl::load_from(const nn::EmbeddingImpl& full) {
  copy_into(weight, full.weight.narrow(0, first, weight.size(0)), "the embedding's rows");
}

Tensor layer_norm_on(nn::LayerNormImpl& norm, const Tensor& x, TokenLayout tokens,
                     const std::shared_ptr<ProcessGroup>& group) {
  if (tokens == TokenLayout::kReplicated) return norm.forward(x);
  // Not norm.forward: a parallelized norm's forward comes back here.
  const bool affine = norm.weight.defined();
  return F::layer_norm(x, norm.options.normalized_shape, affine ? copy_to_tensor_parallel(norm.weight, group) : Tensor(),
                       affine ? copy_to_tensor_parallel(norm.bias, group) : Tensor(), norm.options.eps);
}

Tensor dropout_on(nn::DropoutImpl& dropout, const Tensor& x, TokenLayout tokens, const ProcessGroup& group) {
  if (tokens == TokenLayout::kReplicated) return dropout.forward(x);
  return dropout_on_shard(dropout, x, group, SequenceSplit::kContiguous);
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                    const std::shared_ptr<ProcessGroup>& group) {
  // As cross_entropy under autocast: float32, not 16-bit exponentials and target logits.
  if (autocast_wants_float32({logits})) return vocab_parallel_cross_entropy(autocast_to_float32(logits), targets, group);
  const int64_t local = logits.size(-1), first = group->rank() * local, last_dim = logits.dim() - 1;
  // The row maximum over the whole vocabulary: a constant shift, no gradient.
  Tensor max;
  {
    NoGradGuard no_grad;
    max = amax(logits, {last_dim}, /*keepdim=*/true).contiguous();
    group->all_reduce(max, ReduceOp::Max)->wait();
  }
  Tensor shifted = logits - max;
  Tensor sum_exp = reduce_from_tensor_parallel(sum(exp(shifted), {last_dim}), group);
  Tensor mine = logical_and(targets >= static_cast<double>(first), targets < static_cast<double>(first + local));
  Tensor local_targets = where(mine, targets - static_cast<double>(first), zeros_like(targets));
  Tensor target_logit = gather(shifted, last_dim, local_targets.unsqueeze(last_dim)).squeeze(last_dim) *
                        mine.to(logits.dtype());
  target_logit = reduce_from_tensor_parallel(target_logit, group);
  return (log(sum_exp) - target_logit).mean();
}

}  // namespace loom::parallel
