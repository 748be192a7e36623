// Float8 training for a model's Linear layers, as torchao's
// convert_to_float8_training: each Linear the filter accepts, whose
// in_features and out_features are multiples of 16, runs its forward and
// both gradients' products in float8 (functional::float8_linear), with
// tensorwise dynamic scales. Parameters keep their names and their dtype
// (float32 master weights), so checkpoints load either way. The rest of the
// model is meant to run under bfloat16 autocast (tensor/autocast.h).
//
//   models::GPT gpt(config);
//   std::vector<std::string> done = nn::convert_to_float8_training(
//       *gpt, [](const std::string& name, const nn::LinearImpl&) { return name != "head"; });
//   // "blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.fc", "blocks.0.proj", ...
//   {
//     AutocastGuard autocast(kBFloat16);
//     loss = cross_entropy(gpt->forward(x), y);
//   }
//
// Layers of other widths are left as they are, as torchtitan's float8
// converter leaves them (a character GPT's output layer over a vocabulary of
// 65, say).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/layers/linear.h"
#include "nn/module.h"

namespace loom::nn {

// Whether the Linear at `name` (dotted, from the model) is to run in float8.
using Float8Filter = std::function<bool(const std::string& name, const LinearImpl& linear)>;

// Switches the model's fitting Linear layers (those `filter` accepts; all
// when it is empty) to float8 training, and returns their names in
// named_modules() order. A layer whose weight is not float32 is an error
// (float8 training keeps float32 master weights), as is a model with no
// Linear layer that fits.
std::vector<std::string> convert_to_float8_training(Module& model, const Float8Filter& filter = nullptr);

}  // namespace loom::nn
