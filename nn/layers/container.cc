#include "nn/layers/container.h"

#include <algorithm>
#include <vector>

#include "autograd/checkpoint.h"
#include "nn/layers/basic.h"
#include "nn/layers/conv.h"

namespace loom::nn {

void SequentialImpl::push_back(ModulePtr module) { register_module(std::to_string(size()), std::move(module)); }

Tensor SequentialImpl::forward(const Tensor& x) {
  const auto& children = named_children();
  Tensor y = x;
  for (size_t i = 0; i < children.size(); ++i) {
    // A Conv2d followed by a ReLU runs as one op: the same values and
    // gradients, without a pass over the activation for the ReLU each way.
    auto* conv = dynamic_cast<Conv2dImpl*>(children[i].second.get());
    if (conv && i + 1 < children.size() && dynamic_cast<const ReLUImpl*>(children[i + 1].second.get())) {
      y = conv->forward_relu(y);
      ++i;
      continue;
    }
    y = children[i].second->forward(y);
  }
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

Tensor checkpoint_sequential(const Sequential& seq, int segments, const Tensor& x) {
  const int n = static_cast<int>(seq->size());
  LOOM_CHECK(segments >= 1 && segments <= std::max(n, 1), "checkpoint_sequential: ", segments,
             " segments for a Sequential of ", n, " children (1 to ", n, ")");
  std::vector<ModulePtr> children;
  for (int i = 0; i < n; ++i) children.push_back((*seq)[i]);
  Tensor y = x;
  for (int s = 0; s < segments; ++s) {
    const int begin = n * s / segments, end = n * (s + 1) / segments;
    auto run = [children, begin, end](const Tensor& in) {
      Tensor out = in;
      for (int i = begin; i < end; ++i) out = children[i]->forward(out);
      return out;
    };
    y = s + 1 < segments ? autograd::checkpoint(run, y) : run(y);  // the last run's backward follows at once
  }
  return y;
}

}  // namespace loom::nn
