#include "optim/lr_scheduler.h"

#include <cmath>

namespace loom::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : LRScheduler(optimizer, optimizer.record_initial_lr()) {}

LRScheduler::LRScheduler(Optimizer& optimizer, double base_lr) : optimizer_(optimizer), base_lr_(base_lr) {}

void LRScheduler::step() { set_step(step_ + 1); }

void LRScheduler::set_step(int64_t step) {
  LOOM_CHECK(step >= 0, "LRScheduler: step must be non-negative, got ", step);
  step_ = step;
  const double lr = lr_at(step_);
  LOOM_CHECK(std::isfinite(lr), "LRScheduler: the lr at step ", step_, " is ", lr, " (base lr ", base_lr_, ")");
  optimizer_.set_lr(lr);
}

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> fn)
    : LRScheduler(optimizer), fn_(std::move(fn)) {
  set_step(0);  // as PyTorch: the lr of step 0 applies from construction
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  LOOM_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  set_step(0);
}

double StepLR::factor(int64_t step) const { return std::pow(gamma_, static_cast<double>(step / step_size_)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  LOOM_CHECK(t_max > 0, "CosineAnnealingLR: t_max must be positive, got ", t_max);
  set_step(0);
}

double CosineAnnealingLR::lr_at(int64_t step) const {
  const double t = static_cast<double>(std::min(step, t_max_)) / t_max_;
  return eta_min_ + (base_lr() - eta_min_) * 0.5 * (1 + std::cos(M_PI * t));
}

double CosineAnnealingLR::factor(int64_t step) const { return base_lr() == 0 ? 1 : lr_at(step) / base_lr(); }

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_(total_iters) {
  LOOM_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  set_step(0);
}

double LinearLR::factor(int64_t step) const {
  const double t = static_cast<double>(std::min(step, total_)) / total_;
  return start_ + (end_ - start_) * t;
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    // The same base lr as its children: the optimizer's initial lr.
    : LRScheduler(optimizer),
      schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  LOOM_CHECK(!schedulers_.empty() && milestones_.size() + 1 == schedulers_.size(), "SequentialLR: ",
             schedulers_.size(), " schedulers need ", schedulers_.size() - 1, " milestones, got ", milestones_.size());
  for (size_t i = 1; i < milestones_.size(); ++i)
    LOOM_CHECK(milestones_[i] > milestones_[i - 1], "SequentialLR: milestones must increase");
  set_step(0);  // the first scheduler's starting lr
}

double SequentialLR::lr_at(int64_t step) const {
  size_t i = 0;
  int64_t start = 0;
  while (i < milestones_.size() && step >= milestones_[i]) start = milestones_[i++];
  return schedulers_[i]->lr_at(step - start);
}

double SequentialLR::factor(int64_t step) const { return base_lr() == 0 ? 1 : lr_at(step) / base_lr(); }

}  // namespace loom::optim
