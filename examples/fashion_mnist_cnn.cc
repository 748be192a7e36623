// fashion_mnist_cnn: trains a small CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist) and reports test accuracy each epoch.
//
//   bazel run //examples:fashion_mnist_cnn -- --epochs 5
//   bazel run //examples:fashion_mnist_cnn -- --resume     # continue from the last checkpoint
//
// Every epoch it commits a checkpoint (model, optimizer, epoch, random state,
// metrics rows) and rewrites the metrics CSV; --resume continues from it and
// ends where an uninterrupted run would. The last line is RESULT {json}.
// dp_, ddp_ and pipeline_fashion_mnist train the same model on the same
// batches with the same loop, changed only where their strategies differ.
#include "examples/common/fashion_mnist.h"
#include "examples/common/program.h"
#include "nn/functional.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  return run_program("fashion_mnist_cnn", [&] {
    FashionMnistConfig config;
    Flags flags("Train a CNN on Fashion-MNIST");
    add_fashion_mnist_flags(flags, config);
    flags.parse(argc, argv);

    FashionMnist run(config, flags, Device::parse(config.device));
    for (int64_t epoch = run.first_epoch(); epoch <= config.epochs; ++epoch) {
      for (auto& [x, y] : run.batches(epoch)) {
        Tensor loss = nn::functional::cross_entropy(run.model->forward(x), y);
        run.optimizer.zero_grad();
        loss.backward();
        run.optimizer.step();
        run.step_done(loss);
      }
      if (!run.end_epoch(epoch)) break;
    }
    run.finish();
    return 0;
  });
}
