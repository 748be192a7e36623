// Optimizers: SGD (momentum, Nesterov, weight decay), Adam and AdamW, with
// PyTorch's update rules, and state dicts so that training resumes exactly.
//
//   optim::AdamW opt(model->parameters(), {.lr = 1e-3, .weight_decay = 0.01});
//   for (...) {
//     opt.zero_grad();
//     loss.backward();
//     opt.step();          // one fused kernel over all parameters per device
//   }
//   nn::save_safetensors("opt.safetensors", opt.state_dict());
//
// Parameters whose .grad() is undefined are skipped by step(), as in PyTorch.
//
// A step captured into a CUDA graph (tensor/device_graph.h) runs again at
// every replay with the values the host gave it at capture. So an optimizer
// made with `capturable = true` (PyTorch's name) keeps what changes from step
// to step on the device: the learning rate, which set_lr() writes there, and
// the step count, which each step advances there (Adam's bias corrections
// follow from it). It steps the same eagerly and under a graph; without it, a
// step inside a capture is refused. A capture also refuses to create state:
// take one step outside it first (a warm-up), as PyTorch asks too.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "nn/module.h"
#include "tensor/backend.h"  // DeviceStepScalars

namespace loom::optim {

class Optimizer {
 public:
  Optimizer(TensorList params, double lr, bool capturable = false);
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  // Drops every parameter's gradient, as PyTorch's zero_grad() does; with
  // set_to_none = false, fills the existing gradients with zeros in place
  // instead (they keep their memory: a DDP bucket view stays a view).
  void zero_grad(bool set_to_none = true);

  double lr() const { return lr_; }
  // The lr before any scheduler changed it: what every scheduler of this
  // optimizer scales (PyTorch's param_group["initial_lr"]). The first
  // scheduler made for the optimizer records it.
  double initial_lr() const { return initial_lr_.value_or(lr_); }
  // Records it, if no scheduler has yet, and returns it.
  double record_initial_lr() {
    if (!initial_lr_) initial_lr_ = lr_;
    return *initial_lr_;
  }
  // Capturable: also writes the device's copy, queued as any op (call it
  // between replays, not inside a capture).
  void set_lr(double lr);
  bool capturable() const { return capturable_; }
  // Capturable: GradScaler's inf flags (one float32 element per device) for
  // the steps that follow: where a flag is not 0, a step changes nothing on
  // its device, decided there. An empty map clears them.
  void skip_step_where(std::map<Device, Tensor> found_inf);
  const TensorList& params() const { return params_; }
  // Indices of the parameters that have a gradient, grouped by device (the
  // steps, and GradScaler, make one fused launch per group).
  std::map<Device, std::vector<size_t>> params_with_grad_by_device() const;

  // Per-parameter state as "state.<index>.<name>" plus "lr"; scalars are 0-d
  // tensors. Every parameter has "state.<index>.step", 0 before its first
  // step. Virtual: an optimizer that wraps another (ZeRO) saves its own way.
  virtual nn::NamedTensors state_dict() const;
  // Restores what state_dict() saved; the parameters must match in number and
  // shape, and the state must be complete: every parameter has its step
  // count, one that has stepped each of state_names(), one that has not none.
  virtual void load_state_dict(const nn::NamedTensors& state);
  // The per-parameter state this optimizer keeps once a parameter has stepped.
  virtual std::vector<std::string> state_names() const = 0;

 protected:
  // The state tensor `name` of parameter i, created as zeros like it on first use.
  Tensor& state(size_t i, const std::string& name);
  bool has_state(size_t i, const std::string& name) const;
  // Step counts per parameter, kept as PyTorch does.
  int64_t& step_count(size_t i) { return step_counts_[i]; }

  // Checks the step about to run on `device` over `indices` against a
  // capture under way: refused unless capturable, and `state_name` (the
  // state the step needs, "" for none) must exist already. `who` names the
  // optimizer in the errors.
  void check_capture(const char* who, const std::vector<size_t>& indices, const std::string& state_name) const;
  // A capturable optimizer's scalars on `device` (backend.h's
  // DeviceStepScalars), made at its first step there with the step count
  // before this step, `count_before`; never made inside a capture.
  DeviceStepScalars device_scalars(Device device, int64_t count_before);

 private:
  TensorList params_;
  double lr_;
  std::optional<double> initial_lr_;
  std::vector<std::map<std::string, Tensor>> state_;
  std::vector<int64_t> step_counts_;
  bool capturable_;
  // Capturable: float64 [lr, step count, ...] on each device that stepped.
  std::map<Device, Tensor> device_scalars_;
  std::map<Device, Tensor> found_inf_;  // skip_step_where's
};

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool capturable = false;  // steps a CUDA graph can replay (above)
};

class SGD : public Optimizer {
 public:
  SGD(TensorList params, const SGDOptions& options);
  void step() override;
  std::vector<std::string> state_names() const override;
  SGDOptions options;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: added to the gradient (L2)
  bool capturable = false;  // steps a CUDA graph can replay (above)
};

class Adam : public Optimizer {
 public:
  Adam(TensorList params, const AdamOptions& options);
  void step() override;
  std::vector<std::string> state_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  AdamOptions options;

 protected:
  Adam(TensorList params, const AdamOptions& options, bool decoupled);

 private:
  bool decoupled_;
};

// AdamW: weight decay shrinks the weights directly, apart from the gradient
// (Loshchilov and Hutter); PyTorch's default weight_decay is 0.01.
class AdamW : public Adam {
 public:
  AdamW(TensorList params, const AdamOptions& options = {.weight_decay = 0.01});
};

// Scales all gradients so that their joint L2 norm is at most max_norm, and
// returns that norm before clipping (a 0-d tensor: reading it is the only sync).
Tensor clip_grad_norm_(const TensorList& params, double max_norm);

// Its two halves, for a norm whose squares are summed over ranks first
// (parallel::TensorParallel::clip_grad_norm_): the sum of the gradients'
// squares as a (1) float64 tensor on `device` (zero when none has one), and
// every gradient scaled by min(1, max_norm / total_norm), all on the device.
Tensor grad_squares_sum(const TensorList& params, Device device);
void scale_grads_to_norm_(const TensorList& params, const Tensor& total_norm, double max_norm);

}  // namespace loom::optim
