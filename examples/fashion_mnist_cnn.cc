// fashion_mnist_cnn: trains a small CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist) and reports test accuracy each epoch.
//
//   bazel run //examples:fashion_mnist_cnn -- --epochs 5
//   bazel run //examples:fashion_mnist_cnn -- --resume     # continue from the last checkpoint
//
// Every epoch it appends to a metrics CSV and saves a checkpoint (model,
// optimizer, epoch, random state) atomically; --resume continues from it and
// ends where an uninterrupted run would. The last line is RESULT {json}.
// The loop itself is examples/common/fashion_mnist_training.cc, shared with
// dp_fashion_mnist and ddp_fashion_mnist.
#include "examples/common/fashion_mnist_training.h"
#include "examples/common/program.h"

int main(int argc, char** argv) {
  using namespace loom::examples;
  return run_program("fashion_mnist_cnn", [&] {
    FashionMnistConfig config;
    Flags flags("Train a CNN on Fashion-MNIST");
    add_fashion_mnist_flags(flags, config);
    flags.parse(argc, argv);
    train_fashion_mnist(config, flags, Strategy::single());
    return 0;
  });
}
