// GaussianBlobs: a synthetic classification dataset for tests and examples,
// isotropic Gaussian clusters around random centers (scikit-learn's
// make_blobs), generated from a seed so every run sees the same data.
//
//   GaussianBlobs blobs({.num_samples = 600, .num_features = 2, .num_classes = 3, .seed = 7});
//   Example e = blobs.get(0);  // input float32 [2]; target int64 0-D, in 0..2
//   blobs.centers();           // float32 [3, 2], one row per class
//
// Example i belongs to class i % num_classes (the classes are balanced); its
// input is its class's center plus cluster_std * N(0, 1) noise per feature.
// The centers are uniform in [-center_box, center_box] per feature.
#pragma once

#include <cstdint>

#include "data/tensor_dataset.h"

namespace loom::data {

struct GaussianBlobsOptions {
  int64_t num_samples = 1000;
  int64_t num_features = 2;
  int64_t num_classes = 3;
  double cluster_std = 1.0;
  double center_box = 10.0;
  uint64_t seed = 0;
};

class GaussianBlobs : public TensorDataset {
 public:
  explicit GaussianBlobs(const GaussianBlobsOptions& options = {});
  const Tensor& centers() const { return centers_; }  // (num_classes, num_features)

 private:
  struct Generated;  // the three tensors, made before the base class is built
  static Generated generate(const GaussianBlobsOptions& options);
  explicit GaussianBlobs(const Generated& generated);
  Tensor centers_;
};

}  // namespace loom::data
