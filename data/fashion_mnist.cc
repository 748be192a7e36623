#include "data/fashion_mnist.h"

#include <filesystem>

#include "data/idx.h"
#include "tensor/ops.h"

namespace loom::data {
namespace {

namespace fs = std::filesystem;

// A missing file is the usual first-run problem: say which package has it.
void check_exists(const std::string& path) {
  std::error_code ec;
  LOOM_CHECK(fs::exists(path, ec), "FashionMnist: ", path,
             " not found; install the Debian package ", FashionMnist::kPackage,
             " (sudo apt-get install ", FashionMnist::kPackage,
             ", or run tools/setup.sh), or pass the folder that holds the files as `root`");
}

FashionMnist load_split(const std::string& root, const std::string& split,
                        const FashionMnistOptions& options) {
  return FashionMnist::load((fs::path(root) / (split + "-images-idx3-ubyte.gz")).string(),
                            (fs::path(root) / (split + "-labels-idx1-ubyte.gz")).string(), options);
}

}  // namespace

FashionMnist FashionMnist::train(const std::string& root, const FashionMnistOptions& options) {
  return load_split(root, "train", options);
}

FashionMnist FashionMnist::test(const std::string& root, const FashionMnistOptions& options) {
  return load_split(root, "t10k", options);
}

FashionMnist FashionMnist::load(const std::string& images_path, const std::string& labels_path,
                                const FashionMnistOptions& options) {
  check_exists(images_path);
  check_exists(labels_path);
  // Both headers before either file's data: a file that declares another
  // layout, or more images than the other has labels, costs its header only
  // (a gzip bomb that declares 5,000,000 images read 3.9 GB before this).
  const IdxHeader image_header = read_idx_header(images_path), label_header = read_idx_header(labels_path);
  const std::vector<int64_t>& dims = image_header.dims;
  LOOM_CHECK(image_header.type == IdxType::UInt8 && dims.size() == 3 && dims[1] == kImageSize && dims[2] == kImageSize,
             "FashionMnist: ", images_path, " holds ", idx_loaded_dtype(image_header.type), " of shape ",
             Shape(dims), ", expected uint8 images of shape [N, 28, 28]");
  LOOM_CHECK(label_header.type == IdxType::UInt8 && label_header.dims.size() == 1, "FashionMnist: ", labels_path,
             " holds ", idx_loaded_dtype(label_header.type), " of shape ", Shape(label_header.dims),
             ", expected uint8 labels of shape [N]");
  LOOM_CHECK(dims[0] == label_header.dims[0], "FashionMnist: ", images_path, " holds ", dims[0], " images but ",
             labels_path, " holds ", label_header.dims[0], " labels");
  Tensor images = read_idx(images_path);  // the header read again, and then at most what it declares
  Tensor labels = read_idx(labels_path);
  LOOM_CHECK(images.size(0) == dims[0] && labels.size(0) == dims[0], "FashionMnist: ", images_path, " or ",
             labels_path, " changed while being read");
  const uint8_t* l = labels.data_ptr<uint8_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    LOOM_CHECK(l[i] < kNumClasses, "FashionMnist: ", labels_path, ": label ", int{l[i]},
               " at position ", i, " is not a class number (0..", kNumClasses - 1, ")");

  // x / 255 (a division, as torchvision's ToTensor: 255 maps to exactly 1).
  Tensor x = images.to(kFloat32).div_(255.0).view({images.size(0), 1, kImageSize, kImageSize});
  if (options.normalize) x.add_(-kMean).div_(kStd);
  return FashionMnist(x, labels.to(kInt64));
}

const char* FashionMnist::class_name(int64_t label) {
  static constexpr const char* kNames[kNumClasses] = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  LOOM_CHECK(label >= 0 && label < kNumClasses, "FashionMnist::class_name: ", label,
             " is not a class number (0..", kNumClasses - 1, ")");
  return kNames[label];
}

}  // namespace loom::data
