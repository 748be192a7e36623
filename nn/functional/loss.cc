// Losses: cross-entropy (log-softmax + NLL), NLL and mean squared error.
#include "nn/functional.h"
#include "tensor/autocast.h"

namespace loom::nn::functional {
namespace {

Tensor reduce(const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::Mean: return mean(losses);
    case Reduction::Sum: return sum(losses);
    case Reduction::None: return losses;
  }
  return losses;
}

void check_targets(const char* op, const Tensor& scores, const Tensor& targets, const CrossEntropyOptions& o) {
  LOOM_CHECK(scores.dim() == 2, op, ": expected scores of shape (N, C), got ", scores.shape());
  LOOM_CHECK(is_floating(scores.dtype()), op, ": expected floating-point scores, got ", scores.dtype());
  LOOM_CHECK(targets.dtype() == kInt64, op, ": targets must be int64 class indices, got ", targets.dtype());
  LOOM_CHECK(targets.dim() == 1 && targets.size(0) == scores.size(0), op, ": targets of shape ", targets.shape(),
             " do not match scores of shape ", scores.shape());
  LOOM_CHECK(targets.device() == scores.device(), op, ": scores on ", scores.device(), " but targets on ",
             targets.device());
  if (targets.device().is_cpu()) {  // on a GPU the gather kernel reports a bad index instead
    const int64_t classes = scores.size(1);
    const Tensor host = contiguous_copy(targets);
    const int64_t* t = host.data_ptr<int64_t>();
    for (int64_t i = 0; i < targets.numel(); ++i)
      LOOM_CHECK((t[i] >= 0 && t[i] < classes) || t[i] == o.ignore_index, op, ": target ", t[i],
                 " at position ", i, " is out of range for ", classes, " classes");
  }
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& targets, const CrossEntropyOptions& o) {
  check_targets("nll_loss", log_probs, targets, o);
  Tensor valid = targets != static_cast<double>(o.ignore_index);
  Tensor safe = where(valid, targets, zeros({}, targets.options()));
  Tensor picked = gather(log_probs, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor losses = -picked * valid.to(log_probs.dtype());
  if (o.reduction == Reduction::Mean)  // the mean over the targets that count
    return sum(losses) / sum(valid).to(log_probs.dtype());
  return reduce(losses, o.reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& o) {
  if (autocast_wants_float32({logits})) return cross_entropy(autocast_to_float32(logits), targets, o);
  check_targets("cross_entropy", logits, targets, o);
  return nll_loss(log_softmax(logits, 1), targets, o);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  LOOM_CHECK(input.defined() && target.defined(), "mse_loss: got an undefined tensor");
  LOOM_CHECK(input.shape() == target.shape(), "mse_loss: input of shape ", input.shape(),
             " and target of shape ", target.shape(), " differ");
  return reduce(square(input - target), reduction);
}

}  // namespace loom::nn::functional
