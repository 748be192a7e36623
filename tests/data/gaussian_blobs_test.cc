// GaussianBlobs: reproducible from its seed, balanced classes, and points
// spread around their class's center with the requested standard deviation.
#include "data/gaussian_blobs.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom::data {
namespace {

using testing::values;

TEST(GaussianBlobs, ShapesAndBalancedClasses) {
  GaussianBlobs blobs({.num_samples = 10, .num_features = 4, .num_classes = 3, .seed = 1});
  EXPECT_EQ(blobs.size(), 10);
  EXPECT_EQ(blobs.inputs().shape(), (Shape{10, 4}));
  EXPECT_EQ(blobs.inputs().dtype(), kFloat32);
  EXPECT_EQ(blobs.targets().dtype(), kInt64);
  EXPECT_EQ(blobs.centers().shape(), (Shape{3, 4}));
  EXPECT_EQ(values(blobs.targets()), (std::vector<double>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}));
  EXPECT_LE(amax(blobs.centers().abs()).item(), 10.0);
}

TEST(GaussianBlobs, SameSeedSameData) {
  GaussianBlobs a({.seed = 5}), b({.seed = 5}), c({.seed = 6});
  EXPECT_EQ(values(a.inputs()), values(b.inputs()));
  EXPECT_NE(values(a.inputs()), values(c.inputs()));
  EXPECT_NE(values(a.centers()), values(c.centers()));
}

TEST(GaussianBlobs, PointsAreSpreadAroundTheirCenter) {
  const int64_t n = 30000, classes = 3;
  const double stddev = 0.5;
  GaussianBlobs blobs({.num_samples = n,
                       .num_features = 2,
                       .num_classes = classes,
                       .cluster_std = stddev,
                       .seed = 11});
  // Residual of each point from its own class's center: should be N(0, 0.25).
  Tensor own_center = index_select(blobs.centers(), 0, blobs.targets());
  Tensor residual = (blobs.inputs() - own_center).to(kFloat64);
  // Standard error of the mean over 60000 values: 0.5 / sqrt(60000) = 0.002.
  EXPECT_NEAR(mean(residual).item(), 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(var(residual).item()), stddev, 0.01);
  // Per class and feature too: the class means sit on the centers.
  for (int64_t c = 0; c < classes; ++c) {
    std::vector<int64_t> rows;
    for (int64_t i = c; i < n; i += classes) rows.push_back(i);
    Tensor class_mean = mean(index_select(blobs.inputs(), 0, from_vector(rows)).to(kFloat64), {0});
    EXPECT_LT(testing::max_rel_error(class_mean, blobs.centers().select(0, c).to(kFloat64)), 0.03);
  }
}

TEST(GaussianBlobs, BadOptions) {
  EXPECT_THROW_MSG(GaussianBlobs({.num_samples = 0}),
                   "GaussianBlobs: num_samples (0), num_features (2) "
                   "and num_classes (3) must be at least 1");
  EXPECT_THROW_MSG(GaussianBlobs({.cluster_std = -1}), "GaussianBlobs: cluster_std (-1)");
}

}  // namespace
}  // namespace loom::data
