#include "nn/layers/container.h"

namespace loom::nn {

void SequentialImpl::push_back(ModulePtr module) { register_module(std::to_string(size()), std::move(module)); }

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, child] : named_children()) y = child->forward(y);
  return y;
}

ModulePtr SequentialImpl::clone(std::optional<Device> device) const {
  auto copy = std::make_shared<SequentialImpl>();
  for (const auto& [name, child] : named_children()) copy->push_back(child->clone(device));
  copy->train(is_training());
  return copy;
}

void ModuleListImpl::push_back(ModulePtr module) { register_module(std::to_string(size()), std::move(module)); }

ModulePtr ModuleListImpl::clone(std::optional<Device> device) const {
  auto copy = std::make_shared<ModuleListImpl>();
  for (const auto& [name, child] : named_children()) copy->push_back(child->clone(device));
  copy->train(is_training());
  return copy;
}

}  // namespace loom::nn
