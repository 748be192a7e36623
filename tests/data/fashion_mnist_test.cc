// Fashion-MNIST: the real files of Debian's dataset-fashion-mnist (installed
// by tools/setup.sh), checked against numbers computed independently with
// Python's gzip module; and small fake files for the error cases.
#include "data/fashion_mnist.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/data/test_files.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

using testing::Bytes;
using testing::temp_path;

std::vector<int64_t> label_counts(const Tensor& labels) {
  std::vector<int64_t> counts(10);
  for (int64_t l : labels.to_vector<int64_t>()) counts.at(static_cast<size_t>(l))++;
  return counts;
}

TEST(FashionMnist, TrainingSet) {
  FashionMnist train = FashionMnist::train();
  ASSERT_EQ(train.size(), 60000);
  const Tensor& x = train.inputs();
  const Tensor& y = train.targets();
  EXPECT_EQ(x.shape(), (Shape{60000, 1, 28, 28}));
  EXPECT_EQ(x.dtype(), kFloat32);
  EXPECT_EQ(y.shape(), (Shape{60000}));
  EXPECT_EQ(y.dtype(), kInt64);
  EXPECT_EQ(amin(x).item<float>(), 0.0f);
  EXPECT_EQ(amax(x).item<float>(), 1.0f);
  // Python: sum of all training pixels = 3431114169, so the mean of x is
  // 3431114169 / 255 / 47040000 = 0.28604059...; the published 0.2860. (Each
  // float32 pixel k / 255 is off by up to 3e-8 relative: hence the tolerance.)
  EXPECT_NEAR(mean(x.to(kFloat64)).item(), 0.2860405969887955, 2e-8);
  EXPECT_EQ(label_counts(y), std::vector<int64_t>(10, 6000));
  const std::vector<int64_t> labels = y.to_vector<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(labels.begin(), labels.begin() + 10),
            (std::vector<int64_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));
  // Image 0 (an ankle boot): its pixels sum to 76247 / 255; the last one's to 16684 / 255.
  EXPECT_NEAR(sum(train.get(0).input.to(kFloat64)).item() * 255, 76247, 0.01);
  EXPECT_NEAR(sum(train.get(59999).input.to(kFloat64)).item() * 255, 16684, 0.01);
  EXPECT_EQ(train.get(0).target.item<int64_t>(), 9);
  EXPECT_STREQ(FashionMnist::class_name(9), "Ankle boot");
}

TEST(FashionMnist, TestSetNormalized) {
  FashionMnist test = FashionMnist::test(FashionMnist::kDefaultRoot, {.normalize = true});
  ASSERT_EQ(test.size(), 10000);
  const Tensor& y = test.targets();
  EXPECT_EQ(label_counts(y), std::vector<int64_t>(10, 1000));
  EXPECT_EQ(test.get(0).target.item<int64_t>(), 9);
  EXPECT_EQ(test.get(1).target.item<int64_t>(), 2);
  // Python: test pixel mean 0.28684928 and std 0.35244415 (after / 255), so
  // normalising with the training statistics gives these:
  Tensor x = test.inputs().to(kFloat64);
  EXPECT_NEAR(mean(x).item(), (0.28684928071228494 - 0.2860) / 0.3530, 1e-6);
  EXPECT_NEAR(std::sqrt(var(x, {}, 0).item()), 0.3524441532607146 / 0.3530, 1e-6);
  EXPECT_NEAR(amin(x).item(), -0.2860 / 0.3530, 1e-6);
  EXPECT_NEAR(amax(x).item(), (1 - 0.2860) / 0.3530, 1e-6);
}

TEST(FashionMnist, RootWithoutTrailingSlash) {
  std::string root = FashionMnist::kDefaultRoot;
  root.pop_back();
  EXPECT_EQ(FashionMnist::test(root).size(), 10000);
}

// Writes fake images (N x 28 x 28) and labels files under `dir`.
void write_fake(const std::string& dir, const std::string& split, uint32_t images,
                const Bytes& labels) {
  std::filesystem::create_directories(dir);
  testing::write_gzip(dir + "/" + split + "-images-idx3-ubyte.gz",
                      testing::idx_uint8({images, 28, 28}, Bytes(images * 28 * 28, 255)));
  testing::write_gzip(dir + "/" + split + "-labels-idx1-ubyte.gz",
                      testing::idx_uint8({static_cast<uint32_t>(labels.size())}, labels));
}

TEST(FashionMnist, SmallFakeFolder) {
  const std::string dir = temp_path("fake");
  write_fake(dir, "train", 3, {4, 0, 9});
  FashionMnist ds = FashionMnist::train(dir);
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.targets().to_vector<int64_t>(), (std::vector<int64_t>{4, 0, 9}));
  EXPECT_EQ(amin(ds.inputs()).item<float>(), 1.0f);  // 255 / 255
}

TEST(FashionMnist, MissingFileNamesThePathAndThePackage) {
  const std::string dir = temp_path("nothing-here");
  EXPECT_THROW_MSG(FashionMnist::train(dir),
                   "FashionMnist: " + dir +
                       "/train-images-idx3-ubyte.gz not "
                       "found; install the Debian package dataset-fashion-mnist");
  write_fake(dir, "t10k", 2, {1, 2});
  std::filesystem::remove(dir + "/t10k-labels-idx1-ubyte.gz");
  EXPECT_THROW_MSG(FashionMnist::test(dir), dir +
                                                "/t10k-labels-idx1-ubyte.gz not found; install the "
                                                "Debian package dataset-fashion-mnist");
}

TEST(FashionMnist, ImageAndLabelCountsMustAgree) {
  const std::string dir = temp_path("mismatch");
  write_fake(dir, "train", 3, {1, 2});
  EXPECT_THROW_MSG(FashionMnist::train(dir), "FashionMnist: " + dir +
                                                 "/train-images-idx3-ubyte.gz holds 3 "
                                                 "images but " +
                                                 dir +
                                                 "/train-labels-idx1-ubyte.gz holds 2 labels");
}

// Both files' headers are compared before either's data is read: images that
// claim 5,000,000 pictures (here followed by 10 bytes) beside 3 labels fail
// on the counts, not after reading (or, for a gzip bomb, expanding) the data.
TEST(FashionMnist, CountsAreComparedBeforeAnyDataIsRead) {
  const std::string dir = temp_path("bomb");
  write_fake(dir, "train", 3, {1, 2, 3});
  testing::write_gzip(dir + "/train-images-idx3-ubyte.gz", testing::idx_uint8({5000000, 28, 28}, Bytes(10)));
  EXPECT_THROW_MSG(FashionMnist::train(dir), "FashionMnist: " + dir + "/train-images-idx3-ubyte.gz holds 5000000 "
                                             "images but " + dir + "/train-labels-idx1-ubyte.gz holds 3 labels");
}

TEST(FashionMnist, WrongLayoutsAndLabels) {
  const std::string dir = temp_path("layout");
  write_fake(dir, "train", 2, {1, 10});
  EXPECT_THROW_MSG(FashionMnist::train(dir),
                   "train-labels-idx1-ubyte.gz: label 10 at position 1 is not "
                   "a class number (0..9)");
  // Images of 28 x 27.
  testing::write_gzip(dir + "/train-images-idx3-ubyte.gz",
                      testing::idx_uint8({2, 28, 27}, Bytes(2 * 28 * 27)));
  EXPECT_THROW_MSG(FashionMnist::train(dir),
                   "holds uint8 of shape [2, 28, 27], expected uint8 images of "
                   "shape [N, 28, 28]");
  // A corrupt file: the reader's error, with the path.
  testing::write_gzip(dir + "/train-images-idx3-ubyte.gz", {0x00, 0x00, 0x08});
  EXPECT_THROW_MSG(FashionMnist::train(dir),
                   "read_idx: " + dir + "/train-images-idx3-ubyte.gz: truncated header");
  EXPECT_THROW_MSG(FashionMnist::class_name(10),
                   "FashionMnist::class_name: 10 is not a class number");
}

}  // namespace
}  // namespace loom::data
