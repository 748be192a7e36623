// Layer-split model parallelism: a model's stages placed on devices and run
// one after another on the calling thread; activations move forward and
// gradients backward across devices through Tensor::to (autograd records the
// copies). No micro-batches, so one device works at a time: the win is memory
// (each device holds its stages), not speed — pipeline.h overlaps them.
//
//   parallel::LayerSplit split(parallel::split_sequential(model, {3, 6}), {cuda0, cuda1, cuda0});
//   Tensor loss = nn::functional::cross_entropy(split->forward(x), y);
#pragma once

#include <vector>

#include "nn/module.h"

namespace loom::parallel {

class LayerSplitImpl : public nn::Module {
 public:
  LayerSplitImpl(std::vector<nn::ModulePtr> stages, std::vector<Device> devices);
  Tensor forward(const Tensor& x) override;
  const std::vector<Device>& devices() const { return devices_; }

 private:
  std::vector<nn::ModulePtr> stages_;
  std::vector<Device> devices_;
  std::vector<int> lanes_;  // each stage's trace lane
};

class LayerSplit : public nn::ModuleHolder<LayerSplitImpl> {
 public:
  using ModuleHolder::ModuleHolder;
  LayerSplit(std::vector<nn::ModulePtr> stages, std::vector<Device> devices)
      : ModuleHolder(std::make_shared<LayerSplitImpl>(std::move(stages), std::move(devices))) {}
};

}  // namespace loom::parallel
