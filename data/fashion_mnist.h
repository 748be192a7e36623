// Fashion-MNIST: 28x28 grayscale pictures of clothing in 10 classes (60,000
// for training, 10,000 for testing), Zalando's drop-in replacement for MNIST.
// Debian ships it in the package dataset-fashion-mnist, as gzip'd IDX files
// in /usr/share/datasets/fashion-mnist/.
//
//   FashionMnist train = FashionMnist::train();   // the default folder
//   FashionMnist test = FashionMnist::test(FashionMnist::kDefaultRoot, {.normalize = true});
//   Example e = train.get(0);  // input float32 [1, 28, 28] in [0, 1]; target int64 0-D, 9
//   FashionMnist::class_name(9);  // "Ankle boot"
//
// Inputs are float32 (N, 1, 28, 28), pixel / 255; with `normalize`, also
// (x - 0.2860) / 0.3530, the training set's mean and standard deviation.
// Targets are int64 class numbers in 0..9.
#pragma once

#include <string>

#include "data/tensor_dataset.h"

namespace loom::data {

struct FashionMnistOptions {
  bool normalize = false;  // subtract kMean and divide by kStd
};

class FashionMnist : public TensorDataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist/";
  static constexpr const char* kPackage = "dataset-fashion-mnist";
  static constexpr double kMean = 0.2860;  // of the training pixels, after / 255
  static constexpr double kStd = 0.3530;
  static constexpr int64_t kNumClasses = 10;
  static constexpr int64_t kImageSize = 28;

  // train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz under `root`.
  static FashionMnist train(const std::string& root = kDefaultRoot,
                            const FashionMnistOptions& options = {});
  // t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz under `root`.
  static FashionMnist test(const std::string& root = kDefaultRoot,
                           const FashionMnistOptions& options = {});
  // Any pair of files of this layout (uint8 images (N, 28, 28), uint8 labels
  // (N) in 0..9): also the original MNIST's.
  static FashionMnist load(const std::string& images_path, const std::string& labels_path,
                           const FashionMnistOptions& options = {});

  static const char* class_name(int64_t label);  // "T-shirt/top", ..., "Ankle boot"

 private:
  using TensorDataset::TensorDataset;
};

}  // namespace loom::data
