// Containers: Sequential chains modules; ModuleList only holds them.
//
//   nn::Sequential net(nn::Conv2d({.in_channels = 1, .out_channels = 8, .kernel_size = 3}),
//                      nn::ReLU(), nn::Flatten(), nn::Linear(8 * 26 * 26, 10));
//   Tensor logits = net->forward(x);     // children are named "0", "1", ...
#pragma once

#include "nn/module.h"

namespace loom::nn {

class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}
  template <typename... Modules>
  explicit SequentialImpl(Modules&&... modules) : Module("Sequential") {
    (push_back(std::forward<Modules>(modules)), ...);
  }

  void push_back(ModulePtr module);
  template <typename Holder, typename = decltype(std::declval<Holder>().ptr())>
  void push_back(const Holder& module) {
    push_back(std::static_pointer_cast<Module>(module.ptr()));
  }

  // Each child's forward(Tensor) applied in order (a Conv2d and the ReLU
  // after it as one fused op, Conv2dImpl::forward_relu).
  Tensor forward(const Tensor& x) override;
  size_t size() const { return named_children().size(); }
  ModulePtr operator[](size_t i) const { return named_children().at(i).second; }
  // A Sequential of the children's clones.
  ModulePtr clone(std::optional<Device> device = std::nullopt) const override;
};
LOOM_MODULE(Sequential);

class ModuleListImpl : public Module {
 public:
  ModuleListImpl() : Module("ModuleList") {}
  void push_back(ModulePtr module);
  template <typename Holder, typename = decltype(std::declval<Holder>().ptr())>
  void push_back(const Holder& module) {
    push_back(std::static_pointer_cast<Module>(module.ptr()));
  }
  size_t size() const { return named_children().size(); }
  ModulePtr operator[](size_t i) const { return named_children().at(i).second; }
  // The i-th module as its own type.
  template <typename Impl>
  std::shared_ptr<Impl> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<Impl>((*this)[i]);
    LOOM_CHECK(m != nullptr, "ModuleList: module ", i, " is a ", (*this)[i]->type_name(), ", not the type asked for");
    return m;
  }
  ModulePtr clone(std::optional<Device> device = std::nullopt) const override;
};
LOOM_MODULE(ModuleList);

// The Sequential's forward in `segments` runs of children, each but the last
// under autograd::checkpoint (PyTorch's checkpoint_sequential): only the
// runs' inputs are kept; each run's activations are recomputed in backward.
Tensor checkpoint_sequential(const Sequential& seq, int segments, const Tensor& x);

}  // namespace loom::nn
