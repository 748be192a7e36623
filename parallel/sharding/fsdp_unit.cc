#include "parallel/sharding/fsdp_unit.h"

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

namespace {

std::vector<size_t> all_indices(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace

FsdpUnit::FsdpUnit(std::string name, TensorList params, std::vector<std::string> param_names,
                   std::shared_ptr<ProcessGroup> group)
    : name_(std::move(name)),
      params_(std::move(params)),
      param_names_(std::move(param_names)),
      group_(std::move(group)),
      flat_(params_.empty() ? empty({0}) : flatten_as_views(params_, all_indices(params_.size()))),
      pieces_(flat_.numel(), group_->size()),
      offsets_(flat_offsets(params_, all_indices(params_.size()))) {
  NoGradGuard no_grad;
  if (!params_.empty()) group_->broadcast(flat_, 0)->wait();  // every rank starts from rank 0's parameters
  const int rank = group_->rank();
  shard_ = flat_.narrow(0, pieces_.start(rank), pieces_.size(rank)).clone();
  shard_.requires_grad_();
  gathered_ = true;
  has_grad_.assign(params_.size(), false);
  reset_pending();
}

void FsdpUnit::reset_pending() {
  std::fill(has_grad_.begin(), has_grad_.end(), false);
  pending_ = 0;
  for (const Tensor& p : params_) pending_ += p.requires_grad() ? 1 : 0;
}

void FsdpUnit::start_gather() {
  if (gathered_ || gathering_) return;
  if (params_.empty()) {  // a root whose parameters all sit in other units
    gathered_ = true;
    return;
  }
  NoGradGuard no_grad;
  Storage& storage = *flat_.storage();
  storage.reallocate();
  auto alias = std::make_shared<Storage>(storage.data(), storage.nbytes(), storage.device());
  Tensor target = make_tensor(alias, flat_.shape(), flat_.strides(), flat_.storage_offset(), flat_.dtype());
  gathering_ = group_->all_gather(target, shard_.detach());
}

void FsdpUnit::wait_gathered() {
  start_gather();
  if (gathered_) return;  // nothing to gather
  gathering_->wait();
  gathering_.reset();
  gathered_ = true;
}

void FsdpUnit::release() {
  if (gathering_) wait_gathered();  // a prefetch nobody used: let it land first
  if (!gathered_) return;
  flat_.storage()->release();
  gathered_ = false;
}

bool FsdpUnit::take_gradient(size_t i) {
  LOOM_CHECK(!reduce_, "FSDP unit '", name_, "': parameter '", param_names_[i],
             "' received a gradient after the unit's gradients were reduced; a unit's parameters are used in one "
             "forward per backward");
  NoGradGuard no_grad;
  const Tensor grad = params_[i].grad();
  if (!flat_grad_.defined()) flat_grad_ = zeros({flat_.numel()}, flat_.options());
  Tensor slot = flat_grad_.narrow(0, offsets_[i], params_[i].numel());
  if (has_grad_[i]) {
    slot.add_(grad.reshape({-1}));  // the parameter is used twice in one forward
  } else {
    slot.copy_(grad.reshape({-1}));
    has_grad_[i] = true;
    --pending_;
  }
  params_[i].set_grad(Tensor());
  return pending_ == 0;
}

void FsdpUnit::start_reduce() {
  if (reduce_) return;
  NoGradGuard no_grad;
  if (!flat_grad_.defined()) flat_grad_ = zeros({flat_.numel()}, flat_.options());
  reduced_ = empty({shard_.numel()}, shard_.options());
  reduce_ = group_->reduce_scatter(reduced_, flat_grad_, ReduceOp::Avg);
}

void FsdpUnit::finish_reduce() {
  if (!reduce_) return;
  NoGradGuard no_grad;
  reduce_->wait();
  reduce_.reset();
  flat_grad_ = Tensor();
  const Tensor grad = shard_.grad();
  if (grad.defined())
    grad.add_(reduced_);  // gradients accumulate over backwards, as a parameter's do
  else
    shard_.set_grad(reduced_);
  reduced_ = Tensor();
  reset_pending();
}

Tensor FsdpUnit::gather_pieces(const Tensor& piece) const {
  LOOM_CHECK(piece.numel() == shard_.numel(), "FSDP unit '", name_, "': a piece of ", piece.numel(),
             " elements, but this rank's piece has ", shard_.numel());
  Tensor flat = empty({flat_.numel()}, piece.options());
  group_->all_gather(flat, piece.contiguous().reshape({-1}))->wait();
  return flat;
}

TensorList FsdpUnit::split_flat(const Tensor& flat) const {
  TensorList out;
  for (size_t i = 0; i < params_.size(); ++i)
    out.push_back(flat.narrow(0, offsets_[i], params_[i].numel()).view(params_[i].shape().vec()));
  return out;
}

Tensor FsdpUnit::piece_of(const TensorList& values) const {
  LOOM_CHECK(values.size() == params_.size(), "FSDP unit '", name_, "': expected ", params_.size(),
             " parameters, got ", values.size());
  NoGradGuard no_grad;
  const int rank = group_->rank();
  const int64_t first = pieces_.start(rank), last = first + pieces_.size(rank);
  Tensor piece = empty({last - first}, shard_.options());
  for (size_t i = 0; i < params_.size(); ++i) {
    LOOM_CHECK(values[i].numel() == params_[i].numel(), "FSDP unit '", name_, "': '", param_names_[i], "' has ",
               values[i].numel(), " elements, the parameter ", params_[i].numel());
    // The part of parameter i that falls in this rank's piece.
    const int64_t begin = std::max(first, offsets_[i]), end = std::min(last, offsets_[i] + params_[i].numel());
    if (begin >= end) continue;
    piece.narrow(0, begin - first, end - begin)
        .copy_(values[i].to(shard_.device(), shard_.dtype()).reshape({-1}).narrow(0, begin - offsets_[i], end - begin));
  }
  return piece;
}

void FsdpUnit::load_full(const TensorList& values) {
  NoGradGuard no_grad;
  shard_.copy_(piece_of(values));
}

}  // namespace loom::parallel
