#include "optim/optimizer.h"

#include <cmath>

#include "tensor/backend.h"

namespace loom::optim {

Optimizer::Optimizer(TensorList params, double lr)
    : params_(std::move(params)), lr_(lr), state_(params_.size()), step_counts_(params_.size(), 0) {
  LOOM_CHECK(!params_.empty(), "optimizer: got an empty parameter list");
  LOOM_CHECK(lr >= 0, "optimizer: learning rate must be non-negative, got ", lr);
  for (size_t i = 0; i < params_.size(); ++i)
    LOOM_CHECK(params_[i].defined() && params_[i].is_leaf() && is_floating(params_[i].dtype()),
               "optimizer: parameter ", i, " must be a floating-point leaf tensor");
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
    groups[params_[i].device()].push_back(i);
  }
  return groups;
}

nn::NamedTensors Optimizer::state_dict() const {
  nn::NamedTensors out;
  out.emplace_back("lr", full({}, lr_, {.dtype = kFloat64}));
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "state." + std::to_string(i) + ".";
    if (step_counts_[i] > 0)
      out.emplace_back(prefix + "step", full({}, static_cast<double>(step_counts_[i]), {.dtype = kInt64}));
    for (const auto& [name, t] : state_[i]) out.emplace_back(prefix + name, t);
  }
  return out;
}

void Optimizer::load_state_dict(const nn::NamedTensors& saved) {
  std::vector<std::map<std::string, Tensor>> state(params_.size());
  std::vector<int64_t> steps(params_.size(), 0);
  double lr = lr_;
  for (const auto& [key, t] : saved) {
    if (key == "lr") {
      lr = t.item();
      continue;
    }
    const size_t dot1 = key.find('.'), dot2 = key.find('.', dot1 + 1);
    LOOM_CHECK(key.rfind("state.", 0) == 0 && dot2 != std::string::npos, "optimizer state: unexpected entry '", key,
               "'");
    const size_t i = std::stoul(key.substr(dot1 + 1, dot2 - dot1 - 1));
    const std::string name = key.substr(dot2 + 1);
    LOOM_CHECK(i < params_.size(), "optimizer state: entry '", key, "' is for parameter ", i, ", but there are only ",
               params_.size());
    if (name == "step") {
      steps[i] = t.item<int64_t>();
      continue;
    }
    LOOM_CHECK(t.shape() == params_[i].shape(), "optimizer state: '", key, "' has shape ", t.shape(),
               " but parameter ", i, " has shape ", params_[i].shape());
    state[i][name] = contiguous_copy(t).to(params_[i].device(), params_[i].dtype());
  }
  state_ = std::move(state);
  step_counts_ = std::move(steps);
  lr_ = lr;
}

SGD::SGD(TensorList params, const SGDOptions& o) : Optimizer(std::move(params), o.lr), options(o) {
  LOOM_CHECK(o.momentum >= 0 && o.weight_decay >= 0, "SGD: momentum and weight_decay must be non-negative");
  LOOM_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: Nesterov momentum needs momentum > 0 and no dampening");
}

void SGD::step() {
  NoGradGuard no_grad;
  const bool momentum = options.momentum != 0;
  for (const auto& [device, indices] : params_with_grad_by_device()) {
    // Parameters whose momentum starts this step take their buffer from the
    // gradient itself: they are one launch, the others a second.
    struct Launch {
      TensorList params, grads, buffers;
    } starting, continuing;
    for (size_t i : indices) {
      Launch& l = momentum && !has_state(i, "momentum_buffer") ? starting : continuing;
      l.params.push_back(params()[i]);
      l.grads.push_back(params()[i].grad());
      if (momentum) l.buffers.push_back(state(i, "momentum_buffer"));
      ++step_count(i);
    }
    for (Launch* l : {&starting, &continuing}) {
      if (l->params.empty()) continue;
      SgdParams p{lr(), options.momentum, options.dampening, options.weight_decay, options.nesterov,
                  /*first_step=*/l == &starting};
      backend_for(device).sgd_step(l->params, l->grads, l->buffers, p);
    }
  }
}

Adam::Adam(TensorList params, const AdamOptions& o) : Adam(std::move(params), o, false) {}

Adam::Adam(TensorList params, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(params), o.lr), options(o), decoupled_(decoupled) {
  LOOM_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "Adam: betas must be in [0, 1), got ",
             o.beta1, " and ", o.beta2);
  LOOM_CHECK(o.eps >= 0 && o.weight_decay >= 0, "Adam: eps and weight_decay must be non-negative");
}

void Adam::step() {
  NoGradGuard no_grad;
  for (const auto& [device, indices] : params_with_grad_by_device()) {
    // One launch per distinct step count (normally all parameters share one).
    std::map<int64_t, std::vector<size_t>> by_step;
    for (size_t i : indices) by_step[++step_count(i)].push_back(i);
    for (const auto& [count, group] : by_step) {
      TensorList params, grads, m, v;
      for (size_t i : group) {
        params.push_back(this->params()[i]);
        grads.push_back(this->params()[i].grad());
        m.push_back(state(i, "exp_avg"));
        v.push_back(state(i, "exp_avg_sq"));
      }
      AdamParams p{lr(), options.beta1, options.beta2, options.eps, options.weight_decay, decoupled_, count};
      backend_for(device).adam_step(params, grads, m, v, p);
    }
  }
}

AdamW::AdamW(TensorList params, const AdamOptions& options) : Adam(std::move(params), options, true) {}

Tensor clip_grad_norm_(const TensorList& params, double max_norm) {
  NoGradGuard no_grad;
  TensorList squares;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // Parameters may sit on several devices (model parallelism): sum on the first one's.
    Device home = squares.empty() ? g.device() : squares[0].device();
    squares.push_back(sum(square(g.to(kFloat64))).reshape({1}).to(home));
  }
  if (squares.empty()) return zeros({}, {.dtype = kFloat64});
  Tensor total = sqrt(sum(cat(squares)));
  // min(1, max_norm / total) as a tensor, so no value goes to the host.
  Tensor scale = clamp(max_norm / (total + 1e-6), 0, 1);
  for (const Tensor& p : params)
    if (p.grad().defined()) p.grad().mul_(scale.to(p.grad().device(), p.grad().dtype()));
  return total;
}

}  // namespace loom::optim
