#include "optim/grad_scaler.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/device_graph.h"

namespace loom::optim {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  LOOM_CHECK(options_.init_scale > 0 && options_.growth_factor > 1 && options_.backoff_factor > 0 &&
                 options_.backoff_factor < 1 && options_.growth_interval >= 1,
             "GradScaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= 1");
}

Tensor GradScaler::scale(const Tensor& loss) const { return options_.enabled ? loss * scale_ : loss; }

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  LOOM_CHECK(!capturing_device_graph(), "GradScaler::unscale_ inside a device graph capture: it reads its inf flag "
             "on the host, once a step, and a replay would not; capture bf16 steps (they need no scaler) or "
             "leave the fp16 step uncaptured");
  for (const auto& [done, inf] : unscaled_)
    LOOM_CHECK(done != &optimizer, "GradScaler::unscale_: already called for this optimizer since the last update()");
  if (unscaled_.empty()) found_inf_ = false;  // a new step
  NoGradGuard no_grad;
  // One fused pass per device unscales the gradients and raises that
  // device's flag on an inf or NaN; the flags are read once, below.
  const auto groups = optimizer.params_with_grad_by_device();
  // Scaled gradients the scaler cannot see would be stepped on scaled.
  LOOM_CHECK(!groups.empty() || optimizer.params().empty(), "GradScaler::unscale_: none of the optimizer's ",
             optimizer.params().size(),
             " parameters has a gradient to unscale. Call it after backward; an optimizer that reduces the "
             "gradients inside step() (ZeroRedundancyOptimizer at stage 2) cannot take a GradScaler");
  bool found_here = false;
  for (const auto& [device, indices] : groups) {
    TensorList grads;
    for (size_t i : indices) {
      const Tensor& p = optimizer.params()[i];
      // The fused pass, as the optimizers' steps, takes contiguous gradients.
      if (!p.grad().is_contiguous()) p.set_grad(p.grad().contiguous());
      grads.push_back(p.grad());
    }
    Tensor flag = zeros({1}, {.dtype = kFloat32, .device = device});
    backend_for(device).unscale_and_check_finite(grads, 1.0 / scale_, flag);
    found_here = found_here || flag.item() != 0;  // the read-back: one per device, normally one
  }
  const bool inf = agree_on_inf(found_here);
  unscaled_.emplace_back(&optimizer, inf);
  found_inf_ = found_inf_ || inf;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  auto mine = [&] {
    return std::find_if(unscaled_.begin(), unscaled_.end(), [&](const auto& u) { return u.first == &optimizer; });
  };
  if (mine() == unscaled_.end()) unscale_(optimizer);
  if (mine()->second) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  LOOM_CHECK(!unscaled_.empty(), "GradScaler::update: call step() (or unscale_) first");
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  unscaled_.clear();
}

}  // namespace loom::optim
