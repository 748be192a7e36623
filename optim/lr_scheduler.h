// Learning-rate schedules. A scheduler sets its optimizer's lr to
// lr_at(step), base_lr * factor(step) for the multiplicative ones; step()
// advances by one (call it once per optimizer step, or per epoch: the unit
// is yours). base_lr is the optimizer's lr before any scheduler changed it,
// the same for every scheduler of one optimizer, as in PyTorch. Schedules
// compose with SequentialLR: e.g. a linear warm-up, then cosine decay.
//
//   optim::SequentialLR schedule(opt, {std::make_shared<optim::LinearLR>(opt, 0.01, 1.0, 100),
//                                      std::make_shared<optim::CosineAnnealingLR>(opt, 900)},
//                                {100});
//   for (...) { opt.step(); schedule.step(); }
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  LRScheduler(Optimizer& optimizer, double base_lr);
  virtual ~LRScheduler() = default;
  // The multiplier of the base lr after `step` steps (step 0: before training).
  virtual double factor(int64_t step) const = 0;
  // The lr after `step` steps. A schedule with an absolute floor (cosine's
  // eta_min) computes it directly, so that a base lr of 0 stays finite.
  virtual double lr_at(int64_t step) const { return base_lr_ * factor(step); }

  void step();
  int64_t last_step() const { return step_; }
  double base_lr() const { return base_lr_; }
  // Jumps to `step` (used when resuming from a checkpoint).
  void set_step(int64_t step);

 protected:
  Optimizer& optimizer_;

 private:
  double base_lr_;
  int64_t step_ = 0;
};

// factor(step) = fn(step)
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> fn);
  double factor(int64_t step) const override { return fn_(step); }

 private:
  std::function<double(int64_t)> fn_;
};

// Multiplies by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double factor(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Cosine from base_lr down to eta_min over t_max steps, then flat at eta_min.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0);
  double factor(int64_t step) const override;  // lr_at / base_lr (1 when the base lr is 0)
  double lr_at(int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear from start_factor to end_factor over total_iters steps (a warm-up).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  double factor(int64_t step) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// Runs schedulers one after the other: scheduler i from milestone i-1 on,
// counting its own steps from zero there.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  double factor(int64_t step) const override;
  double lr_at(int64_t step) const override;  // the current child's

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

}  // namespace loom::optim
