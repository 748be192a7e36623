#include "parallel/ddp/reducer.h"

#include <chrono>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"
#include "tensor/stopwatch.h"

namespace loom::parallel {

std::shared_ptr<Reducer> Reducer::create(TensorList params, std::vector<std::string> names,
                                         std::shared_ptr<ProcessGroup> group, ReducerOptions options) {
  std::shared_ptr<Reducer> reducer(new Reducer(std::move(params), std::move(names), std::move(group), options));
  reducer->install_hooks();
  return reducer;
}

Reducer::Reducer(TensorList params, std::vector<std::string> names, std::shared_ptr<ProcessGroup> group,
                 ReducerOptions options)
    : params_(std::move(params)),
      names_(std::move(names)),
      group_(std::move(group)),
      find_unused_(options.find_unused_parameters),
      grad_is_view_(options.gradient_as_bucket_view),
      buckets_(plan_buckets(params_, options.bucket_cap_bytes)),
      slots_(params_.size()),
      ready_(params_.size()),
      pending_(buckets_.size()),
      works_(buckets_.size()),
      pending_at_launch_(buckets_.size()) {
  // Each bucket's flat tensor and the parameters' views into it are made
  // once: a step allocates nothing.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Tensor& first = params_[buckets_[b].front()];
    int64_t numel = 0;
    for (size_t k : buckets_[b]) numel += params_[k].numel();
    Tensor flat = zeros({numel}, {.dtype = first.dtype(), .device = first.device()});
    int64_t offset = 0;
    for (size_t k : buckets_[b]) {
      const int64_t n = params_[k].numel();
      slots_[k] = {b, flat.narrow(0, offset, n).view(params_[k].shape().vec())};
      offset += n;
    }
    flat_.push_back(flat);
  }
  reset_step();
}

void Reducer::install_hooks() {
  // The hooks outlive nothing: a parameter kept after its DDP wrapper is gone
  // finds the Reducer expired and does nothing.
  std::weak_ptr<Reducer> weak = shared_from_this();
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].register_post_accumulate_grad_hook([weak, k](const Tensor&) {
      if (auto reducer = weak.lock()) reducer->on_gradient_ready(k);
    });
}

void Reducer::reset_step() {
  callback_queued_ = false;
  std::fill(ready_.begin(), ready_.end(), false);
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = static_cast<int>(buckets_[b].size());
  gradients_pending_ = static_cast<int>(params_.size());
  next_bucket_ = 0;
  std::fill(works_.begin(), works_.end(), nullptr);
}

void Reducer::set_comm_hook(std::shared_ptr<CommHook> hook) {
  LOOM_CHECK(hook != nullptr, "DistributedDataParallel: register_comm_hook got no hook");
  LOOM_CHECK(!armed_, "DistributedDataParallel: register_comm_hook between a forward and its backward");
  hook_ = std::move(hook);
}

void Reducer::prepare_for_backward(bool sync) {
  reset_step();
  armed_ = sync;
}

void Reducer::on_gradient_ready(size_t k) {
  if (!armed_) return;
  if (!callback_queued_) {
    callback_queued_ = true;
    std::weak_ptr<Reducer> weak = shared_from_this();
    autograd::queue_callback([weak] {
      if (auto reducer = weak.lock()) reducer->finish_backward();
    });
  }
  LOOM_CHECK(!ready_[k], "DistributedDataParallel: parameter '", names_[k],
             "' received its gradient twice in one backward. Run one backward per forward "
             "(or use no_sync() for the extra ones).");
  ready_[k] = true;
  {
    NoGradGuard no_grad;
    const Tensor& view = slots_[k].view;
    Tensor grad = params_[k].grad();
    if (grad.impl() != view.impl()) {  // a view already holds it in the bucket
      view.copy_(grad);
      if (grad_is_view_) params_[k].set_grad(view);
    }
  }
  --gradients_pending_;
  if (--pending_[slots_[k].bucket] == 0) launch_ready_buckets();
}

// Buckets are averaged in order, each as soon as it and those before it are full.
void Reducer::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && pending_[next_bucket_] == 0) {
    const size_t b = next_bucket_++;
    works_[b] = hook_->launch(*group_, b, flat_[b]);
    pending_at_launch_[b] = gradients_pending_;
    stats_.allreduces += 1;
    stats_.bytes += hook_->wire_bytes(flat_[b]);
  }
}

// The wait is the communication backward could not hide.
void Reducer::wait_for_buckets() {
  const Stopwatch waited;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    works_[b]->wait();
    hook_->finish(b, flat_[b]);
  }
  stats_.exposed_wait_s += waited.seconds();
  stats_.synced_backwards += 1;
}

std::string Reducer::missing_gradients() const {
  std::string names;
  for (size_t k = 0; k < params_.size(); ++k)
    if (!ready_[k]) names += (names.empty() ? "'" : ", '") + names_[k] + "'";
  return names;
}

void Reducer::finish_backward() {
  armed_ = false;  // a second backward of the same forward does not synchronise
  if (gradients_pending_ > 0) {
    LOOM_CHECK(find_unused_, "DistributedDataParallel: rank ", group_->rank(),
               ": these parameters received no gradient in this backward: ", missing_gradients(),
               ". Every parameter must contribute to the loss on every rank, or construct "
               "DistributedDataParallel with find_unused_parameters = true.");
    // Locally unused: contribute zeros, so the average counts this rank as
    // having no gradient for them, as PyTorch does.
    NoGradGuard no_grad;
    for (size_t k = 0; k < params_.size(); ++k) {
      if (ready_[k]) continue;
      ready_[k] = true;
      slots_[k].view.zero_();
      --gradients_pending_;
      --pending_[slots_[k].bucket];
    }
    launch_ready_buckets();
  }
  LOOM_INTERNAL_ASSERT(next_bucket_ == buckets_.size(), "Reducer: not every bucket was issued");

  wait_for_buckets();

  NoGradGuard no_grad;
  for (size_t k = 0; k < params_.size(); ++k) {
    Tensor grad = params_[k].grad();
    if (grad.defined() && grad.impl() == slots_[k].view.impl()) continue;  // averaged in place
    if (grad_is_view_)
      params_[k].set_grad(slots_[k].view);  // locally unused: it gets its view now
    else if (grad.defined())
      grad.copy_(slots_[k].view);
    else
      params_[k].set_grad(slots_[k].view.clone());  // locally unused: its first gradient
  }
}

}  // namespace loom::parallel
