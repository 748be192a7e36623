#include "parallel/pipeline/layer_split.h"

#include "parallel/trace.h"

namespace loom::parallel {

LayerSplitImpl::LayerSplitImpl(std::vector<nn::ModulePtr> stages, std::vector<Device> devices)
    : Module("LayerSplit"), stages_(std::move(stages)), devices_(std::move(devices)) {
  LOOM_CHECK(!stages_.empty() && stages_.size() == devices_.size(), "LayerSplit: got ", stages_.size(),
             " stages for ", devices_.size(), " devices");
  for (size_t s = 0; s < stages_.size(); ++s) {
    stages_[s]->to(devices_[s]);
    register_module(std::to_string(s), stages_[s]);
    lanes_.push_back(trace::lane("layer split " + devices_[s].str()));
  }
}

Tensor LayerSplitImpl::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t s = 0; s < stages_.size(); ++s) {
    trace::Span span("forward", "compute", lanes_[s]);
    h = stages_[s]->forward(h.to(devices_[s]));  // the copy is recorded: gradients go back the same way
  }
  return h;
}

}  // namespace loom::parallel
