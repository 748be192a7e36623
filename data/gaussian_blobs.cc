#include "data/gaussian_blobs.h"

#include <vector>

#include "tensor/ops.h"

namespace loom::data {

struct GaussianBlobs::Generated {
  Tensor centers, inputs, targets;
};

GaussianBlobs::Generated GaussianBlobs::generate(const GaussianBlobsOptions& o) {
  LOOM_CHECK(o.num_samples >= 1 && o.num_features >= 1 && o.num_classes >= 1,
             "GaussianBlobs: num_samples (", o.num_samples, "), num_features (", o.num_features,
             ") and num_classes (", o.num_classes, ") must be at least 1");
  LOOM_CHECK(o.cluster_std >= 0 && o.center_box >= 0, "GaussianBlobs: cluster_std (", o.cluster_std,
             ") and center_box (", o.center_box, ") must be non-negative");
  Generator gen(o.seed);
  Tensor centers = uniform({o.num_classes, o.num_features}, -o.center_box, o.center_box, {}, &gen);
  std::vector<int64_t> labels(static_cast<size_t>(o.num_samples));
  for (int64_t i = 0; i < o.num_samples; ++i) labels[i] = i % o.num_classes;
  Tensor targets = from_vector(labels);
  // x: (N, F) = centers[label] + std * noise
  Tensor noise = normal({o.num_samples, o.num_features}, 0.0, o.cluster_std, {}, &gen);
  Tensor inputs = index_select(centers, 0, targets) + noise;
  return {centers, inputs, targets};
}

GaussianBlobs::GaussianBlobs(const GaussianBlobsOptions& options)
    : GaussianBlobs(generate(options)) {}

GaussianBlobs::GaussianBlobs(const Generated& g)
    : TensorDataset(g.inputs, g.targets), centers_(g.centers) {}

}  // namespace loom::data
