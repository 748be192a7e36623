#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tensor/backend.h"
#include "tensor/device_graph.h"

namespace loom::optim {

Optimizer::Optimizer(TensorList params, double lr, bool capturable)
    : params_(std::move(params)),
      lr_(lr),
      state_(params_.size()),
      step_counts_(params_.size(), 0),
      capturable_(capturable) {
  LOOM_CHECK(!params_.empty(), "optimizer: got an empty parameter list");
  LOOM_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got ", lr);
  std::map<const TensorImpl*, size_t> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    LOOM_CHECK(params_[i].defined() && params_[i].is_leaf() && is_floating(params_[i].dtype()),
               "optimizer: parameter ", i, " must be a floating-point leaf tensor");
    // Listed twice, a parameter would take two steps with one gradient, and
    // on a GPU two blocks of one fused launch would update it concurrently.
    const auto [first, inserted] = seen.emplace(params_[i].impl(), i);
    LOOM_CHECK(inserted, "optimizer: parameter ", i, " is parameter ", first->second,
               " again (a module registered twice in the model?); pass each parameter once");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (set_to_none)
      p.set_grad(Tensor());
    else if (p.grad().defined())
      p.grad().zero_();
  }
}

void Optimizer::set_lr(double lr) {
  LOOM_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got ", lr);
  LOOM_CHECK(device_scalars_.empty() || !capturing_device_graph(),
             "optimizer: set_lr inside a device graph capture would run once, at capture; set the learning rate "
             "(step the scheduler) between replays");
  lr_ = lr;
  NoGradGuard no_grad;
  for (auto& [device, scalars] : device_scalars_) scalars.narrow(0, 0, 1).fill_(lr);
}

void Optimizer::check_capture(const char* who, const std::vector<size_t>& indices,
                              const std::string& state_name) const {
  if (!capturing_device_graph()) return;
  LOOM_CHECK(capturable_, who, ": its step is being captured into a device graph, but its learning rate and step "
             "count live on the host, where replays would not change them; construct it with .capturable = true");
  if (state_name.empty()) return;
  for (size_t i : indices)
    LOOM_CHECK(has_state(i, state_name), who, ": parameter ", i, " has no '", state_name, "' yet, and state made "
               "inside a device graph capture would be made again at every replay; take one step outside the "
               "capture first (a warm-up)");
}

void Optimizer::skip_step_where(std::map<Device, Tensor> found_inf) {
  LOOM_CHECK(capturable_ || found_inf.empty(), "optimizer: skipping a step on the device's inf flag needs "
             ".capturable = true");
  found_inf_ = std::move(found_inf);
}

DeviceStepScalars Optimizer::device_scalars(Device device, int64_t count_before) {
  Tensor& scalars = device_scalars_[device];
  if (!scalars.defined()) {
    LOOM_CHECK(!capturing_device_graph(), "optimizer: its first step on ", device, " is being captured into a device "
               "graph; take one step outside the capture first (a warm-up)");
    // [lr, step count, and two words a step writes for itself (Adam's bias corrections)]
    scalars = from_vector<double>({lr_, static_cast<double>(count_before), 0, 0}).to(device);
  }
  auto flag = found_inf_.find(device);
  return {scalars.data_ptr<double>(), flag == found_inf_.end() ? nullptr : flag->second.data_ptr<float>()};
}

Tensor& Optimizer::state(size_t i, const std::string& name) {
  auto it = state_[i].find(name);
  if (it == state_[i].end()) it = state_[i].emplace(name, zeros_like(params_[i])).first;
  return it->second;
}

bool Optimizer::has_state(size_t i, const std::string& name) const { return state_[i].count(name) > 0; }

std::map<Device, std::vector<size_t>> Optimizer::params_with_grad_by_device() const {
  std::map<Device, std::vector<size_t>> groups;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    LOOM_CHECK(g.device() == params_[i].device() && g.shape() == params_[i].shape(), "optimizer: parameter ", i,
               " has a gradient of shape ", g.shape(), " on ", g.device(), " for a parameter of shape ",
               params_[i].shape(), " on ", params_[i].device());
    // The fused steps walk parameter, gradient and state element by element
    // in memory order (the CUDA kernel checked this; the CPU's updated a
    // transposed parameter with other elements' gradients). A gradient is
    // read only: the steps take a contiguous copy of a strided one.
    LOOM_CHECK(params_[i].is_contiguous(), "optimizer: parameter ", i, " (shape ", params_[i].shape(),
               ") is not contiguous; the optimizers update parameters in place, in memory order");
    groups[params_[i].device()].push_back(i);
  }
  return groups;
}

nn::NamedTensors Optimizer::state_dict() const {
  nn::NamedTensors out;
  out.emplace_back("lr", full({}, lr_, {.dtype = kFloat64}));
  // A capturable optimizer's counts are the device's: graph replays advance
  // them there alone (reading them waits for the device).
  std::map<Device, int64_t> device_counts;
  for (const auto& [device, scalars] : device_scalars_)
    device_counts[device] = static_cast<int64_t>(scalars.narrow(0, 1, 1).item());
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    int64_t count = step_counts_[i];
    auto on_device = device_counts.find(params_[i].device());
    if (count > 0 && on_device != device_counts.end()) count = on_device->second;
    // Every parameter's count, 0 before its first step: a state that lacks a
    // parameter's entries is then incomplete, not a parameter that never stepped.
    out.emplace_back(prefix + "step", full({}, static_cast<double>(count), {.dtype = kInt64}));
    for (const auto& [name, t] : state_[i]) out.emplace_back(prefix + name, t);
  }
  return out;
}

namespace {

// The i of "state.<i>.<name>", strictly: decimal digits only, below `count`.
size_t parameter_index(const std::string& key, size_t count, std::string* name) {
  const size_t dot1 = key.find('.'), dot2 = key.find('.', dot1 + 1);
  LOOM_CHECK(key.compare(0, 6, "state.") == 0 && dot2 != std::string::npos && dot2 > dot1 + 1 && dot2 - dot1 <= 20,
             "optimizer state: unexpected entry '", key, "' (expected lr or state.<index>.<name>)");
  size_t i = 0;
  for (size_t c = dot1 + 1; c < dot2; ++c) {
    LOOM_CHECK(key[c] >= '0' && key[c] <= '9', "optimizer state: entry '", key, "' has a non-numeric index");
    i = i * 10 + static_cast<size_t>(key[c] - '0');
  }
  LOOM_CHECK(i < count, "optimizer state: entry '", key, "' is for parameter ", i, ", but there are only ", count);
  *name = key.substr(dot2 + 1);
  return i;
}

}  // namespace

void Optimizer::load_state_dict(const nn::NamedTensors& saved) {
  std::vector<std::map<std::string, Tensor>> state(params_.size());
  std::vector<std::optional<int64_t>> steps(params_.size());
  std::optional<double> lr;
  for (const auto& [key, t] : saved) {
    LOOM_CHECK(t.defined(), "optimizer state: '", key, "' is undefined");
    if (key == "lr") {
      LOOM_CHECK(!lr && t.numel() == 1 && is_floating(t.dtype()), "optimizer state: 'lr' must appear once, as a ",
                 "floating-point scalar");
      lr = t.item();
      LOOM_CHECK(*lr >= 0, "optimizer state: 'lr' is ", *lr, "; a learning rate is non-negative");
      continue;
    }
    std::string name;
    const size_t i = parameter_index(key, params_.size(), &name);
    if (name == "step") {
      LOOM_CHECK(t.numel() == 1 && !is_floating(t.dtype()), "optimizer state: '", key, "' must be an integer scalar");
      LOOM_CHECK(!steps[i], "optimizer state: '", key, "' appears twice");
      steps[i] = t.item<int64_t>();
      LOOM_CHECK(*steps[i] >= 0, "optimizer state: '", key, "' is ", *steps[i], "; a step count is not negative");
      continue;
    }
    LOOM_CHECK(t.shape() == params_[i].shape() && is_floating(t.dtype()), "optimizer state: '", key, "' has shape ",
               t.shape(), " and dtype ", t.dtype(), " but parameter ", i, " has shape ", params_[i].shape(),
               " and dtype ", params_[i].dtype());
    LOOM_CHECK(state[i].emplace(name, contiguous_copy(t).to(params_[i].device(), params_[i].dtype())).second,
               "optimizer state: '", key, "' appears twice");
  }
  LOOM_CHECK(lr.has_value(), "optimizer state: 'lr' is missing");
  // Every parameter has its step count; one that has stepped has all of its
  // state, one that has not, none.
  const std::vector<std::string> names = state_names();
  for (size_t i = 0; i < params_.size(); ++i) {
    LOOM_CHECK(steps[i].has_value(), "optimizer state: parameter ", i, " has no 'state.", i, ".step' (saved for every ",
               "parameter, 0 before its first step): the state is incomplete, or saved for another model");
    const bool stepped = *steps[i] > 0;
    for (const std::string& name : names)
      LOOM_CHECK(stepped == (state[i].count(name) > 0), "optimizer state: parameter ", i,
                 stepped ? " has taken steps but 'state." : " has taken no step but has 'state.", i, ".", name,
                 stepped ? "' is missing" : "'", " (an incomplete or mismatched checkpoint)");
    for (const auto& [name, t] : state[i])
      LOOM_CHECK(std::find(names.begin(), names.end(), name) != names.end(), "optimizer state: 'state.", i, ".", name,
                 "' is not state of this optimizer (saved by another kind?)");
  }
  state_ = std::move(state);
  for (size_t i = 0; i < params_.size(); ++i) step_counts_[i] = *steps[i];
  lr_ = *lr;
  device_scalars_.clear();  // made again from the loaded counts at the next step
}

SGD::SGD(TensorList params, const SGDOptions& o) : Optimizer(std::move(params), o.lr, o.capturable), options(o) {
  LOOM_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD: momentum and weight_decay must be non-negative");
  LOOM_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: Nesterov momentum needs momentum > 0 and no dampening");
}

std::vector<std::string> SGD::state_names() const {
  if (options.momentum == 0) return {};
  return {"momentum_buffer"};
}

void SGD::step() {
  NoGradGuard no_grad;
  const bool momentum = options.momentum != 0;
  for (const auto& [device, indices] : params_with_grad_by_device()) {
    check_capture("SGD::step", indices, momentum ? "momentum_buffer" : "");
    // Parameters whose momentum starts this step take their buffer from the
    // gradient itself: they are one launch, the others a second.
    struct Launch {
      TensorList params, grads, buffers;
    } starting, continuing;
    // The lambda captures `ids`, not the binding: a structured binding cannot be captured before C++20 (clang-14).
    LOOM_CHECK(!capturable() || std::all_of(indices.begin(), indices.end(),
                                            [this, &ids = indices](size_t i) {
                                              return step_count(i) == step_count(ids[0]);
                                            }),
               "SGD with capturable = true: the parameters on ", device, " have taken different numbers of steps; a "
               "capturable optimizer steps them all together");
    for (size_t i : indices) {
      Launch& l = momentum && !has_state(i, "momentum_buffer") ? starting : continuing;
      l.params.push_back(params()[i]);
      l.grads.push_back(params()[i].grad().contiguous());
      if (momentum) l.buffers.push_back(state(i, "momentum_buffer"));
      ++step_count(i);
    }
    for (Launch* l : {&starting, &continuing}) {
      if (l->params.empty()) continue;
      SgdParams p{lr(), options.momentum, options.dampening, options.weight_decay, options.nesterov,
                  /*first_step=*/l == &starting, /*device=*/{}};
      if (capturable()) {
        p.device = device_scalars(device, step_count(indices[0]) - 1);
        p.device.advance = l == &starting || starting.params.empty();  // one count a step
      }
      backend_for(device).sgd_step(l->params, l->grads, l->buffers, p);
    }
  }
}

Adam::Adam(TensorList params, const AdamOptions& o) : Adam(std::move(params), o, false) {}

Adam::Adam(TensorList params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params), o.lr, o.capturable), options(o), decoupled_(decoupled) {
  LOOM_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam: betas must be in [0, 1), got ",
             o.beta1, " and ", o.beta2);
  LOOM_CHECK(o.eps >= 0 && o.weight_decay >= 0, "Adam: eps and weight_decay must be non-negative");
}

void Adam::step() {
  NoGradGuard no_grad;
  for (const auto& [device, indices] : params_with_grad_by_device()) {
    check_capture(decoupled_ ? "AdamW::step" : "Adam::step", indices, "exp_avg");
    // One launch per distinct step count (normally all parameters share one).
    std::map<int64_t, std::vector<size_t>> by_step;
    for (size_t i : indices) by_step[++step_count(i)].push_back(i);
    // The device keeps one count per device for all of them.
    LOOM_CHECK(!capturable() || by_step.size() == 1, decoupled_ ? "AdamW" : "Adam", " with capturable = true: the "
               "parameters on ", device, " have taken different numbers of steps; a capturable optimizer steps them "
               "all together");
    for (const auto& [count, group] : by_step) {
      TensorList params, grads, m, v;
      for (size_t i : group) {
        params.push_back(this->params()[i]);
        grads.push_back(this->params()[i].grad().contiguous());
        m.push_back(state(i, "exp_avg"));
        v.push_back(state(i, "exp_avg_sq"));
      }
      AdamParams p{lr(), options.beta1, options.beta2, options.eps, options.weight_decay, decoupled_, count,
                   /*device=*/{}};
      if (capturable()) p.device = device_scalars(device, count - 1);
      backend_for(device).adam_step(params, grads, m, v, p);
    }
  }
}

AdamW::AdamW(TensorList params, const AdamOptions& options) : Adam(std::move(params), options, true) {}

Tensor grad_squares_sum(const TensorList& params, Device device) {
  NoGradGuard no_grad;
  TensorList squares;
  for (const Tensor& p : params)
    if (p.grad().defined()) squares.push_back(sum(square(p.grad().to(kFloat64))).reshape({1}).to(device));
  return squares.empty() ? zeros({1}, {.dtype = kFloat64, .device = device}) : sum(cat(squares)).reshape({1});
}

void scale_grads_to_norm_(const TensorList& params, const Tensor& total_norm, double max_norm) {
  NoGradGuard no_grad;
  // min(1, max_norm / total) as a tensor, so no value goes to the host.
  const Tensor scale = clamp(max_norm / (total_norm + 1e-6), 0, 1);
  // Converted once per device and dtype, not once per gradient (a launch each).
  std::map<std::pair<Device, DType>, Tensor> scales;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    Tensor& s = scales[{g.device(), g.dtype()}];
    if (!s.defined()) s = scale.to(g.device(), g.dtype());
    g.mul_(s);
  }
}

Tensor clip_grad_norm_(const TensorList& params, double max_norm) {
  NoGradGuard no_grad;
  // Parameters may sit on several devices (model parallelism): sum on the first gradient's.
  auto first = std::find_if(params.begin(), params.end(), [](const Tensor& p) { return p.grad().defined(); });
  if (first == params.end()) return zeros({}, {.dtype = kFloat64});
  const Tensor total = sqrt(sum(grad_squares_sum(params, first->grad().device())));
  scale_grads_to_norm_(params, total, max_norm);
  return total;
}

}  // namespace loom::optim
