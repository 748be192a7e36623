#include "optim/grad_scaler.h"

#include <algorithm>

#include "autograd/grad_mode.h"
#include "tensor/backend.h"
#include "tensor/creation.h"
#include "tensor/device_graph.h"

namespace loom::optim {
namespace {

// The gradients of the optimizer's parameters `indices`, made contiguous in
// place: the fused unscale pass, as the optimizers' steps, takes them so.
TensorList contiguous_grads(Optimizer& optimizer, const std::vector<size_t>& indices) {
  TensorList grads;
  for (size_t i : indices) {
    const Tensor& p = optimizer.params()[i];
    if (!p.grad().is_contiguous()) p.set_grad(p.grad().contiguous());
    grads.push_back(p.grad());
  }
  return grads;
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  LOOM_CHECK(options_.init_scale > 0 && options_.growth_factor > 1 && options_.backoff_factor > 0 &&
                 options_.backoff_factor < 1 && options_.growth_interval >= 1,
             "GradScaler: needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and growth_interval >= 1");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  if (!options_.capturable) return loss * scale_;
  if (!device_scale_.defined()) {
    LOOM_CHECK(!capturing_device_graph(), "GradScaler: its first scale() is being captured into a device graph, "
               "which would set the scale back at every replay; take one step outside the capture first (a warm-up)");
    device_scale_ = full({}, scale_, {.dtype = kFloat32, .device = loss.device()});
    device_good_steps_ = zeros({}, {.dtype = kFloat32, .device = loss.device()});
  }
  LOOM_CHECK(loss.device() == device_scale_.device(), "GradScaler (capturable): the loss is on ", loss.device(),
             " but the scale on ", device_scale_.device());
  return loss * device_scale_;
}

double GradScaler::get_scale() const {
  return options_.capturable && device_scale_.defined() ? device_scale_.item() : scale_;
}

bool GradScaler::found_inf() const {
  return options_.capturable ? last_flags_.defined() && last_flags_.item() != 0 : found_inf_;
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  LOOM_CHECK(options_.capturable || !capturing_device_graph(), "GradScaler::unscale_ inside a device graph capture: "
             "it reads its inf flag on the host, once a step, and a replay would not; make it with "
             ".capturable = true (and the optimizer too)");
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
  if (options_.capturable) return unscale_on_device(optimizer, groups);
  bool found_here = false;
  for (const auto& [device, indices] : groups) {
    Tensor flag = zeros({1}, {.dtype = kFloat32, .device = device});
    backend_for(device).unscale_and_check_finite(contiguous_grads(optimizer, indices), 1.0 / scale_, flag);
    found_here = found_here || flag.item() != 0;  // the read-back: one per device, normally one
  }
  const bool inf = agree_on_inf(found_here);
  unscaled_.emplace_back(&optimizer, inf);
  found_inf_ = found_inf_ || inf;
}

// Each device's flag, raised on the device; the optimizer reads it there.
void GradScaler::unscale_on_device(Optimizer& optimizer, const std::map<Device, std::vector<size_t>>& groups) {
  LOOM_CHECK(optimizer.capturable(), "GradScaler (capturable): the optimizer must be capturable too, to skip a step "
             "on the device where a gradient is inf or NaN");
  LOOM_CHECK(device_scale_.defined(), "GradScaler::unscale_: call scale() on the loss first");
  std::map<Device, Tensor>& flags = device_flags_[&optimizer];
  for (const auto& [device, indices] : groups) {
    LOOM_CHECK(device == device_scale_.device(), "GradScaler (capturable): a gradient is on ", device,
               " but the scale on ", device_scale_.device(), "; one device a scaler");
    Tensor flag = zeros({1}, {.dtype = kFloat32, .device = device});
    backend_for(device).unscale_and_check_finite(contiguous_grads(optimizer, indices), 0, flag, device_scale_);
    flags[device] = flag;
  }
  unscaled_.emplace_back(&optimizer, false);  // whether it had an inf is known on the device alone
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
  if (options_.capturable) {
    optimizer.skip_step_where(device_flags_[&optimizer]);
    optimizer.step();
    optimizer.skip_step_where({});
    return true;
  }
  if (mine()->second) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  LOOM_CHECK(!unscaled_.empty(), "GradScaler::update: call step() (or unscale_) first");
  if (options_.capturable) {
    // Any optimizer's inf counts, as on the host.
    Tensor any;
    for (const auto& [optimizer, flags] : device_flags_)
      for (const auto& [device, flag] : flags) any = any.defined() ? any + flag : flag;
    if (!any.defined()) any = zeros({1}, {.dtype = kFloat32, .device = device_scale_.device()});
    backend_for(device_scale_.device())
        .update_grad_scale(device_scale_, device_good_steps_, any, options_.growth_factor, options_.backoff_factor,
                           options_.growth_interval);
    last_flags_ = any;
    device_flags_.clear();
    unscaled_.clear();
    return;
  }
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
