// Dynamic loss scaling for float16 training (torch.cuda.amp.GradScaler):
// float16's smallest values are about 6e-8, and small gradients underflow to
// zero. The loss is multiplied by a large scale before backward, so the
// gradients are too; before the optimizer steps they are divided back. When
// any gradient overflowed to inf or NaN the step is skipped and the scale
// halved; after `growth_interval` good steps in a row it doubles.
//
//   optim::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.step(opt);    // unscales, checks all gradients at once, steps unless one is inf/NaN
//   scaler.update();     // halves the scale after a skipped step, grows it after enough good ones
//
// With several optimizers, as PyTorch's: unscale_ (to clip) and step each,
// then update() once. Each optimizer skips its step only if its own
// gradients had an inf or NaN; update() halves the scale if any had.
//
// As PyTorch's, it can be constructed disabled (GradScalerOptions::enabled)
// for the runs that do not need it (fp32, bf16).
//
// Unscaling and the check are one fused pass over all of an optimizer's
// gradients on a device (Backend::unscale_and_check_finite, PyTorch's
// _amp_foreach_non_finite_check_and_unscale_: one launch per dtype on a GPU),
// which raises a flag on the device; the flag is the one number read back
// per optimizer and step, not one per tensor.
//
// With `capturable = true` nothing is read back at all, so that a CUDA graph
// can capture the step (tensor/device_graph.h), as PyTorch's GradScaler with
// a fused optimizer: the scale and the count of good steps live on the loss's
// device (made at the first scale(), outside a capture), the optimizer
// (capturable too) skips its step on the device where the flag is up, and
// update() is one kernel. step() then returns true whether or not the
// device skipped; get_scale() and found_inf() read the device (they wait).
#pragma once

#include <map>
#include <utility>
#include <vector>

#include "optim/optimizer.h"

namespace loom::optim {

struct GradScalerOptions {
  // Disabled, it passes through (scale() returns the loss, step() steps,
  // update() does nothing), so one training loop serves every precision.
  bool enabled = true;
  double init_scale = 65536.0;  // 2^16, as PyTorch
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  bool capturable = false;  // everything on the device (above)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  virtual ~GradScaler() = default;

  // loss * scale.
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale and checks them for inf
  // and NaN; once per optimizer and step (step() calls it if you have not).
  void unscale_(Optimizer& optimizer);
  // optimizer.step() unless one of its gradients was inf or NaN. Returns
  // whether it stepped.
  bool step(Optimizer& optimizer);
  // Adjusts the scale for the next step; call once per step, after the
  // optimizers' step().
  void update();

  double get_scale() const;
  // Whether the gradients unscaled in the last step (of any optimizer) had an inf or NaN.
  bool found_inf() const;

 protected:
  // Whether to skip, given whether this process's gradients of one optimizer
  // had an inf or NaN. Ranks that each hold part of a model's gradients must
  // decide together (parallel::ShardedGradScaler).
  virtual bool agree_on_inf(bool found_here) { return found_here; }

 private:
  GradScalerOptions options_;
  double scale_;
  int good_steps_ = 0;
  // This step's unscaled optimizers, each with whether its gradients had an inf or NaN.
  std::vector<std::pair<const Optimizer*, bool>> unscaled_;
  bool found_inf_ = false;

  // Capturable: the scale and the good steps since the last inf (one float32
  // each, on the loss's device), made by the first scale(), hence mutable;
  // this step's flags by optimizer and device, and the last step's sum.
  void unscale_on_device(Optimizer& optimizer, const std::map<Device, std::vector<size_t>>& groups);
  mutable Tensor device_scale_, device_good_steps_;
  std::map<const Optimizer*, std::map<Device, Tensor>> device_flags_;
  Tensor last_flags_;
};

}  // namespace loom::optim
