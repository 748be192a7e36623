// What the parallel-training equivalence tests share: the models (a CNN
// with optional BatchNorm2d for data parallelism, an MLP of eight children to
// cut into pipeline stages) and how far two models' parameters are apart.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>

#include "nn/nn.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {

// Input [batch, 2, 6, 6], 3 classes. With BatchNorm the convolution has no
// bias, as such nets are built: BatchNorm subtracts the channel mean, so that
// bias's exact gradient is zero, and Adam would scale the rounding noise left
// in its place (~1e-16) by lr / eps = 1e6 into the tolerance itself.
inline nn::Sequential make_net(bool batch_norm) {
  nn::Sequential net(
      nn::Conv2d({.in_channels = 2, .out_channels = 4, .kernel_size = 3, .padding = 1, .bias = !batch_norm}));
  if (batch_norm) net->push_back(nn::BatchNorm2d(4));
  net->push_back(nn::ReLU());
  net->push_back(nn::Flatten());
  net->push_back(nn::Linear(4 * 6 * 6, 16));
  net->push_back(nn::LayerNorm(16));
  net->push_back(nn::Tanh());
  net->push_back(nn::Linear(16, 3));
  return net;
}

// Input [batch, 6], 3 classes; eight children, so that split_sequential can
// cut it into up to eight stages.
inline nn::Sequential make_pipeline_net() {
  return nn::Sequential(nn::Linear(6, 8), nn::Tanh(), nn::Linear(8, 8), nn::LayerNorm(8), nn::ReLU(),
                        nn::Linear(8, 8), nn::Tanh(), nn::Linear(8, 3));
}

// The largest relative difference between corresponding parameters.
inline double max_param_difference(const TensorList& a, const TensorList& b) {
  EXPECT_EQ(a.size(), b.size()) << "different numbers of parameters";
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    worst = std::max(worst, loom::testing::max_rel_error(a[i], b[i]));
  return worst;
}
inline double max_param_difference(const nn::Module& a, const nn::Module& b) {
  return max_param_difference(a.parameters(), b.parameters());
}

}  // namespace loom::parallel::testing
