// What the parallel-training equivalence tests share: the model (Conv2d,
// optional BatchNorm2d, Linear, LayerNorm) and how far two models' parameters
// are apart.
#pragma once

#include <algorithm>

#include "nn/nn.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {

// Input [batch, 2, 6, 6], 3 classes.
inline nn::Sequential make_net(bool batch_norm) {
  nn::Sequential net(nn::Conv2d({.in_channels = 2, .out_channels = 4, .kernel_size = 3, .padding = 1}));
  if (batch_norm) net->push_back(nn::BatchNorm2d(4));
  net->push_back(nn::ReLU());
  net->push_back(nn::Flatten());
  net->push_back(nn::Linear(4 * 6 * 6, 16));
  net->push_back(nn::LayerNorm(16));
  net->push_back(nn::Tanh());
  net->push_back(nn::Linear(16, 3));
  return net;
}

// The largest relative difference between corresponding parameters.
inline double max_param_difference(const nn::Module& a, const nn::Module& b) {
  TensorList pa = a.parameters(), pb = b.parameters();
  double worst = 0;
  for (size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, loom::testing::max_rel_error(pa[i], pb[i]));
  return worst;
}

}  // namespace loom::parallel::testing
