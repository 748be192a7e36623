// Normalisation layers.
//
//   nn::BatchNorm2d bn(32);          // per-channel over (N, H, W); running stats as buffers
//   nn::LayerNorm ln({384});         // over the last dim
#pragma once

#include <vector>

#include "nn/module.h"

namespace loom::nn {

struct BatchNorm2dOptions {
  int64_t num_features = 0;
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
};

// Training mode normalises with the batch's statistics and updates the
// running_mean / running_var buffers; eval mode uses those buffers.
class BatchNorm2dImpl : public Cloneable<BatchNorm2dImpl> {
 public:
  using Options = BatchNorm2dOptions;
  explicit BatchNorm2dImpl(const BatchNorm2dOptions& options);
  explicit BatchNorm2dImpl(int64_t num_features) : BatchNorm2dImpl(BatchNorm2dOptions{num_features}) {}

  void reset() override;
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;

  BatchNorm2dOptions options;
  Tensor weight, bias, running_mean, running_var;
};
LOOM_MODULE(BatchNorm2d);

struct LayerNormOptions {
  std::vector<int64_t> normalized_shape;
  double eps = 1e-5;
  bool elementwise_affine = true;
};

class LayerNormImpl : public Cloneable<LayerNormImpl> {
 public:
  using Options = LayerNormOptions;
  explicit LayerNormImpl(const LayerNormOptions& options);
  explicit LayerNormImpl(int64_t features) : LayerNormImpl(LayerNormOptions{{features}}) {}

  void reset() override;
  Tensor forward(const Tensor& x) override;
  void pretty_print(std::ostream& out) const override;

  LayerNormOptions options;
  Tensor weight, bias;
};
LOOM_MODULE(LayerNorm);

}  // namespace loom::nn
