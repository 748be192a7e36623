#include "nn/float8_training.h"

#include "tensor/float8.h"

namespace loom::nn {

std::vector<std::string> convert_to_float8_training(Module& model, const Float8Filter& filter) {
  std::vector<std::string> names;
  std::vector<LinearImpl*> chosen;  // owned by the model
  int64_t linears = 0;
  for (const auto& [name, module] : model.named_modules()) {
    auto* linear = dynamic_cast<LinearImpl*>(module.get());
    if (linear == nullptr) continue;
    ++linears;
    const bool fits = float8_fits(linear->options.in_features) && float8_fits(linear->options.out_features);
    if (!fits || (filter && !filter(name, *linear))) continue;
    LOOM_CHECK(linear->weight.dtype() == kFloat32, "convert_to_float8_training: Linear '", name, "' has a ",
               linear->weight.dtype(), " weight; float8 training keeps float32 master weights (convert the ",
               "model to float32 and run it under autocast instead)");
    names.push_back(name);
    chosen.push_back(linear);
  }
  LOOM_CHECK(!chosen.empty(), "convert_to_float8_training: none of the model's ", linears,
             " Linear layers can run in float8 (in_features and out_features must be multiples of 16",
             filter ? ", and the filter must accept the layer" : "", ")");
  // Switched only once every layer passed its check: a refusal leaves the model as it was.
  for (LinearImpl* linear : chosen) linear->set_float8_training(true);
  return names;
}

}  // namespace loom::nn
