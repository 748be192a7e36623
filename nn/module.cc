#include "nn/module.h"

#include <algorithm>
#include <sstream>

namespace loom::nn {
namespace {

template <typename Entry>
auto find_named(std::vector<std::pair<std::string, Entry>>& entries, const std::string& name) {
  return std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
}

template <typename Entry>
auto find_named(const std::vector<std::pair<std::string, Entry>>& entries, const std::string& name) {
  return std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
}

void check_name(const Module& m, const std::string& name, const char* what) {
  LOOM_CHECK(!name.empty() && name.find('.') == std::string::npos, m.type_name(), ": invalid ", what,
             " name '", name, "' (names must be non-empty and contain no '.')");
}

}  // namespace

Tensor Module::forward(const Tensor&) {
  LOOM_FAIL(type_name_, " has no forward(Tensor); call its own forward overload");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_name(*this, name, "parameter");
  LOOM_CHECK(tensor.defined(), type_name_, ": parameter '", name, "' is undefined");
  LOOM_CHECK(find_named(parameters_, name) == parameters_.end() && find_named(buffers_, name) == buffers_.end(),
             type_name_, ": '", name, "' is already registered");
  if (requires_grad && !tensor.requires_grad()) tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_name(*this, name, "buffer");
  LOOM_CHECK(find_named(parameters_, name) == parameters_.end() && find_named(buffers_, name) == buffers_.end(),
             type_name_, ": '", name, "' is already registered");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

ModulePtr Module::register_module(const std::string& name, ModulePtr module) {
  check_name(*this, name, "submodule");
  LOOM_CHECK(module != nullptr, type_name_, ": submodule '", name, "' is null");
  LOOM_CHECK(find_named(children_, name) == children_.end(), type_name_, ": submodule '", name,
             "' is already registered");
  children_.emplace_back(name, module);
  return module;
}

void Module::replace_module(const std::string& name, ModulePtr module) {
  LOOM_CHECK(module != nullptr, type_name_, ": the replacement for submodule '", name, "' is null");
  auto it = find_named(children_, name);
  LOOM_CHECK(it != children_.end(), type_name_, ": has no submodule '", name, "' to replace");
  it->second = std::move(module);
}

void Module::set_forward_override(ForwardFn forward, std::string description) {
  LOOM_CHECK(forward != nullptr, type_name_, ": an empty forward override");
  LOOM_CHECK(!forward_override_, type_name_, " already runs ", forward_override_description_, "; it cannot also run ",
             description);
  forward_override_ = std::move(forward);
  forward_override_description_ = std::move(description);
}

void Module::collect_named(const std::string& prefix, bool recurse, bool buffers, NamedTensors& out) const {
  for (const auto& [name, t] : buffers ? buffers_ : parameters_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect_named(prefix + name + ".", true, buffers, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect_named("", recurse, false, out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect_named("", recurse, true, out);
  return out;
}

TensorList Module::parameters(bool recurse) const {
  TensorList out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

TensorList Module::buffers(bool recurse) const {
  TensorList out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_modules() {
  std::vector<std::pair<std::string, ModulePtr>> out{{"", shared_from_this()}};
  for (const auto& [name, child] : children_)
    for (auto& [sub, m] : child->named_modules()) out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    if (p.device() == device) continue;
    Tensor grad = p.grad();
    p.set_data(p.to(device));
    if (grad.defined()) p.set_grad(grad.to(device));
  }
  for (const Tensor& b : buffers())
    if (b.device() != device) b.set_data(b.to(device));
}

void Module::to(DType dtype) {
  LOOM_CHECK(is_floating(dtype), type_name_, ".to: modules convert to floating-point dtypes only, got ", dtype);
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    if (!is_floating(p.dtype()) || p.dtype() == dtype) continue;
    Tensor grad = p.grad();
    p.set_grad(Tensor());
    p.set_data(p.to(dtype));
    if (grad.defined()) p.set_grad(grad.to(dtype));
  }
  for (const Tensor& b : buffers())
    if (is_floating(b.dtype()) && b.dtype() != dtype) b.set_data(b.to(dtype));
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad(Tensor());
}

StateDict Module::state_dict() const {
  StateDict state = named_parameters();
  for (auto& entry : named_buffers()) state.push_back(entry);
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict own = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, target] : own) {
    auto it = find_named(state, name);
    if (it == state.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != target.shape() || is_floating(it->second.dtype()) != is_floating(target.dtype())) {
      // Float widths convert (as in PyTorch); an integer never becomes a float or back.
      std::ostringstream s;
      s << name << " (checkpoint " << it->second.shape() << " " << it->second.dtype() << ", model " << target.shape()
        << " " << target.dtype() << ")";
      mismatched.push_back(s.str());
    }
  }
  for (const auto& [name, t] : state)
    if (find_named(own, name) == own.end()) unexpected.push_back(name);
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  LOOM_CHECK(mismatched.empty(), "load_state_dict: shape or dtype mismatch for ", join(mismatched));
  LOOM_CHECK(!strict || (missing.empty() && unexpected.empty()), "load_state_dict: ",
             missing.empty() ? "" : "missing keys: " + join(missing), missing.empty() || unexpected.empty() ? "" : "; ",
             unexpected.empty() ? "" : "unexpected keys: " + join(unexpected));
  NoGradGuard no_grad;
  for (const auto& [name, target] : own) {
    auto it = find_named(state, name);
    if (it == state.end()) continue;
    target.copy_(it->second);  // a handle: copying into it fills the module's tensor
  }
}

ModulePtr Module::clone(std::optional<Device>) const {
  LOOM_FAIL(type_name_, " cannot be cloned: derive it from nn::Cloneable<", type_name_,
            "Impl> and create its parameters and submodules in reset()");
}

void Module::clear_registrations() {
  parameters_.clear();
  buffers_.clear();
  children_.clear();
}

void Module::copy_state_from(const Module& original, std::optional<Device> device) {
  // An override's closure refers to the original's own tensors and groups: a
  // copy would run the original's computation, or a rank's slices twice.
  LOOM_CHECK(!original.forward_override_, "clone: this ", type_name_, " runs ",
             original.forward_override_description_, " (parallel/parallelize.h), which a copy cannot share; ",
             "clone the model before parallelizing it");
  NoGradGuard no_grad;
  auto copy_entries = [&](const NamedTensors& from, NamedTensors& to, const char* what) {
    LOOM_CHECK(from.size() == to.size(), "clone: ", type_name_, "::reset() registered ", to.size(), " ", what,
               "s, the original has ", from.size());
    for (const auto& [name, value] : from) {
      auto it = find_named(to, name);
      LOOM_CHECK(it != to.end(), "clone: ", type_name_, "::reset() did not recreate ", what, " '", name, "'");
      it->second.set_data(contiguous_copy(value).to(device.value_or(value.device())));
      if (it->second.is_leaf()) it->second.requires_grad_(value.requires_grad());
    }
  };
  copy_entries(original.parameters_, parameters_, "parameter");
  copy_entries(original.buffers_, buffers_, "buffer");
  LOOM_CHECK(original.children_.size() == children_.size(), "clone: ", type_name_, "::reset() registered ",
             children_.size(), " submodules, the original has ", original.children_.size());
  for (const auto& [name, child] : original.children_) {
    auto it = find_named(children_, name);
    LOOM_CHECK(it != children_.end() && it->second != child, "clone: ", type_name_,
               "::reset() did not create a new submodule '", name, "'");
    it->second->copy_state_from(*child, device);
  }
  training_ = original.training_;
}

void Module::pretty_print(std::ostream& out) const { out << type_name_ << "()"; }

namespace {

void print_tree(std::ostream& out, const Module& m, int indent) {
  if (m.named_children().empty()) {
    m.pretty_print(out);
    if (m.has_forward_override()) out << " [" << m.forward_override_description() << "]";
    return;
  }
  out << m.type_name() << "(\n";
  for (const auto& [name, child] : m.named_children()) {
    out << std::string(indent + 2, ' ') << '(' << name << "): ";
    print_tree(out, *child, indent + 2);
    out << '\n';
  }
  out << std::string(indent, ' ') << ')';
  if (m.has_forward_override()) out << " [" << m.forward_override_description() << "]";
}

}  // namespace

std::ostream& operator<<(std::ostream& out, const Module& module) {
  print_tree(out, module, 0);
  return out;
}

}  // namespace loom::nn
