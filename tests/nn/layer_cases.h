// Every nn layer, once: the table that drives both the CPU's finite-difference
// gradcheck of each layer (tests/nn/nn_gradcheck_test.cc, in float64) and the
// GPU-against-CPU check (tests/cuda/cuda_layers_test.cc), so a new layer gets
// both by being listed here.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "nn/nn.h"

namespace loom::testing {

struct LayerCase {
  std::string name;
  std::function<nn::ModulePtr()> make;
  Shape input;
  int64_t vocabulary = 0;  // > 0: the input is token ids below it
  bool eval = false;       // run in eval mode (BatchNorm's running statistics)
};

inline std::vector<LayerCase> layer_cases() {
  return {
      {"Linear", [] { return nn::Linear(7, 5); }, {4, 7}},
      {"Conv2dStridedPadded",
       [] { return nn::Conv2d({.in_channels = 3, .out_channels = 4, .kernel_size = 3, .stride = 2, .padding = 1}); },
       {2, 3, 9, 9}},
      {"Conv2dGroupedDilated",
       [] {
         return nn::Conv2d({.in_channels = 4, .out_channels = 6, .kernel_size = 3, .padding = 2, .dilation = 2, .groups = 2})
             ;
       },
       {2, 4, 8, 8}},
      {"BatchNorm2dTraining", [] { return nn::BatchNorm2d(3); }, {4, 3, 5, 5}},
      {"BatchNorm2dEval", [] { return nn::BatchNorm2d(3); }, {4, 3, 5, 5}, 0, true},
      {"LayerNorm", [] { return nn::LayerNorm(6); }, {3, 4, 6}},
      {"MaxPool2d", [] { return nn::MaxPool2d(2); }, {2, 3, 8, 8}},
      {"AvgPool2dPadded", [] { return nn::AvgPool2d(nn::Pool2dOptions{.kernel_size = 3, .stride = 2, .padding = 1}); },
       {2, 3, 7, 7}},
      {"AdaptiveAvgPool2d", [] { return nn::AdaptiveAvgPool2d(3); }, {2, 3, 7, 7}},
      {"Embedding", [] { return nn::Embedding(10, 4); }, {3, 5}, 10},
      {"LSTMTwoLayers", [] { return nn::LSTM({.input_size = 5, .hidden_size = 6, .num_layers = 2}); }, {7, 3, 5}},
      {"LSTMCell", [] { return nn::LSTMCell({.input_size = 5, .hidden_size = 6}); }, {3, 5}},
      {"CausalSelfAttention", [] { return nn::CausalSelfAttention({.embed_dim = 8, .num_heads = 2}); }, {2, 5, 8}},
      {"GELU", [] { return nn::GELU(); }, {4, 6}},
      {"Softmax", [] { return nn::Softmax(-1); }, {4, 6}},
      {"SmallCnn",
       [] {
         return nn::Sequential(nn::Conv2d({.in_channels = 1, .out_channels = 4, .kernel_size = 3, .padding = 1}),
                               nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(4 * 4 * 4, 3))
             ;
       },
       {5, 1, 8, 8}},
  };
}

inline void PrintTo(const LayerCase& c, std::ostream* out) { *out << c.name; }

}  // namespace loom::testing
