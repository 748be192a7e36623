// Module: the base of every layer and model. A module owns parameters,
// buffers and submodules, each registered by name, so that
// named_parameters() gives hierarchical names ("blocks.0.attn.qkv.weight"),
// state_dict() saves them and load_state_dict() restores them.
//
// A layer is written as an Impl class plus a handle (PyTorch's C++ frontend):
//
//   class TinyImpl : public nn::Cloneable<TinyImpl> {
//    public:
//     TinyImpl() : Cloneable("Tiny") { reset(); }
//     void reset() override {               // creates everything, by name
//       fc = register_module("fc", nn::Linear(4, 2));
//       scale = register_parameter("scale", ones({2}));
//     }
//     Tensor forward(const Tensor& x) override { return fc->forward(x) * scale; }
//     nn::Linear fc{nullptr};
//     Tensor scale;
//   };
//   LOOM_MODULE(Tiny);                      // Tiny is a shared handle to a TinyImpl
//
//   Tiny model;
//   model->to(Device::cuda(0));
//   for (auto& [name, p] : model->named_parameters()) ...   // "fc.weight", "fc.bias", "scale"
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/ops.h"

namespace loom::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;  // registration order
using StateDict = NamedTensors;

struct NoOptions {};

class Module;
using ModulePtr = std::shared_ptr<Module>;

// A shared handle to a module implementation: nn::Linear holds a LinearImpl.
// Copies share the module; `->` reaches its methods; `handle(x)` calls forward.
// A holder is a ModulePtr wherever one is asked for (DDP, DataParallel,
// pipeline stages), and a ModulePtr of the right kind becomes a holder:
//   nn::Sequential seq(some_module_ptr);   // a clear error if it is not a Sequential
template <typename Impl>
class ModuleHolder {
 public:
  ModuleHolder() : impl_(std::make_shared<Impl>()) {}
  ModuleHolder(std::nullptr_t) {}  // an empty handle, to be assigned in reset()
  ModuleHolder(const typename Impl::Options& options) : impl_(std::make_shared<Impl>(options)) {}
  template <typename First, typename... Rest,
            typename = std::enable_if_t<!std::is_base_of_v<ModuleHolder, std::decay_t<First>> &&
                                        !std::is_same_v<std::decay_t<First>, std::nullptr_t> &&
                                        !std::is_same_v<std::decay_t<First>, ModulePtr>>>
  explicit ModuleHolder(First&& first, Rest&&... rest)
      : impl_(std::make_shared<Impl>(std::forward<First>(first), std::forward<Rest>(rest)...)) {}
  ModuleHolder(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  ModuleHolder(const ModulePtr& module);  // defined below Module

  operator ModulePtr() const { return impl_; }

  Impl* operator->() const { return impl_.get(); }
  Impl& operator*() const { return *impl_; }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  explicit operator bool() const { return impl_ != nullptr; }
  template <typename... Args>
  decltype(auto) operator()(Args&&... args) const {
    return impl_->forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<Impl> impl_;
};

#define LOOM_MODULE(Name)                                                 \
  class Name : public ::loom::nn::ModuleHolder<Name##Impl> {              \
   public:                                                                \
    using ::loom::nn::ModuleHolder<Name##Impl>::ModuleHolder;             \
  }

class Module : public std::enable_shared_from_this<Module> {
 public:
  using Options = NoOptions;

  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = default;  // Cloneable copies, then rebuilds the registrations
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }
  // The one-tensor forward that Sequential chains; modules with other
  // signatures add overloads (bring this one in with `using Module::forward`).
  virtual Tensor forward(const Tensor& x);

  // ---- registration, done in a module's reset() ----
  // Returns the registered tensor, which is the same handle the module keeps.
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  ModulePtr register_module(const std::string& name, ModulePtr module);
  // A handle (nn::Linear, ...) in, the same handle out.
  template <typename Holder, typename = decltype(std::declval<Holder>().ptr())>
  Holder register_module(const std::string& name, Holder module) {
    register_module(name, std::static_pointer_cast<Module>(module.ptr()));
    return module;
  }

  // Puts `module` where the child `name` was, keeping its place in the
  // children (FSDP wraps its units this way). Sequential and ModuleList call
  // their children through that list; a module that keeps its own handle to
  // the child (a member) goes on calling the old one.
  void replace_module(const std::string& name, ModulePtr module);

  // ---- a forward run another way (parallel/parallelize.h) ----
  // From now on forward(x) calls `forward` instead of the module's own
  // computation; `description` says what it runs ("colwise over 2 ranks")
  // and is printed after the module. The module keeps its place, its name
  // and its parameters (a parallel transform reshapes them in place to this
  // rank's slices), so every handle to it, a member or a container's entry,
  // runs the new forward. Linear, Embedding, LayerNorm, Dropout and
  // CausalSelfAttention honour it; a module that already has one refuses a
  // second, and a module that has one, or holds one, cannot be cloned.
  using ForwardFn = std::function<Tensor(const Tensor&)>;
  void set_forward_override(ForwardFn forward, std::string description);
  bool has_forward_override() const { return static_cast<bool>(forward_override_); }
  const std::string& forward_override_description() const { return forward_override_description_; }

  // ---- traversal; names are dotted paths from this module ----
  NamedTensors named_parameters(bool recurse = true) const;
  TensorList parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, ModulePtr>>& named_children() const { return children_; }
  // This module (named "") and all below it, depth first.
  std::vector<std::pair<std::string, ModulePtr>> named_modules();
  int64_t num_parameters() const;

  // ---- mode, placement, gradients ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves parameters (with their gradients) and buffers, in place.
  void to(Device device);
  // Converts floating-point parameters and buffers, in place.
  void to(DType dtype);
  // Drops the parameters' gradients (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  // ---- state ----
  StateDict state_dict() const;  // parameters and buffers by name
  // Copies values in; with strict, a missing, unexpected or wrongly-shaped
  // entry is an error that lists the names and shapes.
  void load_state_dict(const StateDict& state, bool strict = true);

  // ---- copies ----
  // A deep copy with its own parameters, on `device` (default: where they are).
  virtual ModulePtr clone(std::optional<Device> device = std::nullopt) const;
  // (Re)creates this module's parameters, buffers and submodules.
  virtual void reset() {}

  // One line describing this module: "Linear(in_features=4, out_features=2, bias=true)".
  virtual void pretty_print(std::ostream& out) const;

 protected:
  // What a layer's forward calls first: the override, if one is set.
  const ForwardFn& forward_override() const { return forward_override_; }
  // Cloneable's deep copy: drop the registrations copied from the original...
  void clear_registrations();
  // ...and, after reset() rebuilt them, copy the original's values in.
  void copy_state_from(const Module& original, std::optional<Device> device);

  template <typename Derived>
  friend class Cloneable;

 private:
  void collect_named(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out) const;

  std::string type_name_;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  bool training_ = true;
  ForwardFn forward_override_;
  std::string forward_override_description_;
};

// Prints the module tree as PyTorch does.
std::ostream& operator<<(std::ostream& out, const Module& module);
template <typename Impl>
std::ostream& operator<<(std::ostream& out, const ModuleHolder<Impl>& module) {
  return out << *module;
}

// The base of modules that can be deep-copied: copy-constructs the derived
// class (keeping its options), then calls reset() to build fresh parameters
// and copies the original's values into them. The random number generator
// is left as it was, so cloning does not change later random draws.
template <typename Derived>
class Cloneable : public Module {
 public:
  using Module::Module;
  ModulePtr clone(std::optional<Device> device = std::nullopt) const override {
    auto copy = std::make_shared<Derived>(static_cast<const Derived&>(*this));
    copy->clear_registrations();
    {
      NoGradGuard no_grad;
      const GeneratorState rng = default_generator().state();
      copy->reset();
      default_generator().set_state(rng);
    }
    copy->copy_state_from(*this, device);
    return copy;
  }
};

template <typename Impl>
ModuleHolder<Impl>::ModuleHolder(const ModulePtr& module) : impl_(std::dynamic_pointer_cast<Impl>(module)) {
  LOOM_CHECK(module != nullptr, "a module holder was given a null module");
  LOOM_CHECK(impl_ != nullptr, "a ", module->type_name(), " module cannot be held by this holder: it holds "
             "another kind of module");
}

}  // namespace loom::nn
