// fashion_mnist_cnn: trains a small CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist) and reports test accuracy each epoch.
//
//   bazel run //examples:fashion_mnist_cnn -- --epochs 5
//   bazel run //examples:fashion_mnist_cnn -- --resume     # continue from the last checkpoint
//   bazel run //examples:fashion_mnist_cnn -- --precision bf16   # mixed precision (autocast)
//   bazel run //examples:fashion_mnist_cnn -- --device cuda --cuda-graph   # each step one CUDA graph
//   bazel run //examples:fashion_mnist_cnn -- --tensorboard runs   # then: tensorboard --logdir runs
//
// Every epoch it commits a checkpoint (model, optimizer, epoch, random state,
// metrics rows) and rewrites the metrics CSV; --resume continues from it and
// ends where an uninterrupted run would. SIGTERM or SIGUSR1 stops it after
// the current step with a checkpoint of that step and exit status 75
// (kExitPreempted); --resume then goes on from the next batch. The last line is RESULT {json}.
// dp_, ddp_ and pipeline_fashion_mnist train the same model on the same
// batches with the same loop, changed only where their strategies differ.
#include "examples/common/fashion_mnist.h"
#include "examples/common/graphed_step.h"
#include "examples/common/program.h"
#include "nn/functional.h"
#include "optim/grad_scaler.h"
#include "tensor/autocast.h"

int main(int argc, char** argv) {
  using namespace loom;
  using namespace loom::examples;
  return run_program("fashion_mnist_cnn", [&] {
    FashionMnistConfig config;
    Flags flags("Train a CNN on Fashion-MNIST");
    add_fashion_mnist_flags(flags, config);
    std::string precision = "fp32";
    flags.add("--precision", precision,
              "fp32, or bf16 / fp16: the forward under autocast (fp16 with loss scaling); weights stay fp32",
              Scope::Run, CLI::IsMember({"fp32", "bf16", "fp16"}));
    flags.add_switch("--cuda-graph", config.cuda_graph,
                     "CUDA: capture the training step once and replay it for every full batch",
                     Scope::Run);
    flags.parse(argc, argv);
    const std::optional<DType> autocast = autocast_dtype_for(precision);
    // Its scale starts over on --resume; with --cuda-graph it lives on the GPU.
    optim::GradScaler scaler({.enabled = precision == "fp16", .capturable = config.cuda_graph});

    FashionMnist run(config, flags, Device::parse(config.device));
    GraphedStep graphed(config.cuda_graph, Device::parse(config.device));
    auto train_step = [&](const Tensor& x, const Tensor& y) {
      Tensor loss;
      {
        AutocastGuard guard(autocast);
        loss = nn::functional::cross_entropy(run.model->forward(x), y);
      }
      run.optimizer.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(run.optimizer);
      scaler.update();
      return loss;
    };
    for (int64_t epoch = run.first_epoch(); epoch <= config.epochs; ++epoch) {
      for (auto& [x, y] : run.batches(epoch))
        if (!run.step_done(graphed(x, y, train_step))) break;  // a stop signal: end_epoch commits this step
      if (!run.end_epoch(epoch)) break;
    }
    return run.finish();  // 0, or 75 after a stop signal (docs/examples.md)
  });
}
