// fashion_mnist_cnn: trains a small CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist) and reports test accuracy each epoch.
//
//   bazel run //examples:fashion_mnist_cnn -- --epochs 5
//   bazel run //examples:fashion_mnist_cnn -- --resume     # continue from the last checkpoint
//
// Every epoch it appends to a metrics CSV and saves a checkpoint (model,
// optimizer, epoch, random state) atomically; --resume continues from it and
// ends where an uninterrupted run would. The last line is RESULT {json}.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "data/dataloader.h"
#include "data/fashion_mnist.h"
#include "examples/common/progress.h"
#include "examples/models/models.h"
#include "optim/lr_scheduler.h"
#include "optim/training_checkpoint.h"

using namespace loom;

struct Evaluation {
  double loss = 0, accuracy = 0;
};

Evaluation evaluate(nn::Module& model, const data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  double loss = 0;
  int64_t correct = 0, seen = 0;
  for (auto& [x, y] : loader.epoch(0)) {
    Tensor logits = model.forward(x);
    loss += nn::functional::cross_entropy(logits, y, {.reduction = nn::functional::Reduction::Sum}).item();
    correct += sum(argmax(logits, 1) == y).item<int64_t>();
    seen += y.size(0);
  }
  model.train();
  return {loss / seen, static_cast<double>(correct) / seen};
}

int main(int argc, char** argv) {
  CLI::App app{"Train a CNN on Fashion-MNIST"};
  int epochs = 5, width = 16, workers = 2, log_every = 100;
  int64_t max_steps_per_epoch = 0, stop_after_epoch = 0;
  int64_t batch_size = 128;
  double lr = 2e-3;
  uint64_t seed = 0;
  std::string device_name = "cpu", data_root = data::FashionMnist::kDefaultRoot;
  std::string metrics = "fashion_mnist_cnn.csv", checkpoint = "fashion_mnist_cnn.safetensors";
  bool resume = false;
  app.add_option("--epochs", epochs, "passes over the 60,000 training images")->capture_default_str();
  app.add_option("--batch-size", batch_size, "images per step")->capture_default_str();
  app.add_option("--lr", lr, "AdamW learning rate (cosine-decayed to 0)")->capture_default_str();
  app.add_option("--width", width, "channels of the first convolution (the benchmark CNN is 32)")->capture_default_str();
  app.add_option("--device", device_name, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--data", data_root, "folder with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--workers", workers, "threads that prepare batches ahead")->capture_default_str();
  app.add_option("--metrics", metrics, "metrics CSV, one row per epoch")->capture_default_str();
  app.add_option("--checkpoint", checkpoint, "checkpoint written after every epoch")->capture_default_str();
  app.add_flag("--resume", resume, "continue from --checkpoint");
  app.add_option("--seed", seed, "random seed (weights, shuffling)")->capture_default_str();
  app.add_option("--log-every", log_every, "steps between progress lines when not on a terminal")->capture_default_str();
  app.add_option("--max-steps-per-epoch", max_steps_per_epoch, "stop each epoch early (0: the whole epoch; for quick checks)")
      ->capture_default_str();
  app.add_option("--stop-after-epoch", stop_after_epoch, "exit after this epoch, as if interrupted (0: never)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    const Device device = Device::parse(device_name);
    manual_seed(seed);
    data::DataLoader train(data::FashionMnist::train(data_root, {.normalize = true}),
                           {.batch_size = batch_size, .shuffle = true, .seed = seed, .num_workers = workers, .device = device});
    data::DataLoader test(data::FashionMnist::test(data_root, {.normalize = true}),
                          {.batch_size = 1000, .num_workers = workers, .device = device});
    nn::Sequential model = models::fashion_cnn(width);
    model->to(device);
    optim::AdamW opt(model->parameters(), {.lr = lr, .weight_decay = 1e-4});
    const int64_t steps_per_epoch =
        max_steps_per_epoch > 0 ? std::min(max_steps_per_epoch, train.num_batches()) : train.num_batches();
    optim::CosineAnnealingLR schedule(opt, epochs * steps_per_epoch);
    optim::TrainingProgress progress;
    examples::MetricsCsv csv(metrics, {"epoch", "step", "train_loss", "test_loss", "test_accuracy", "samples_per_s", "seconds"});
    if (resume) {
      progress = optim::load_training_checkpoint(checkpoint, *model, opt);
      schedule.set_step(progress.step);
      csv.load_existing(static_cast<double>(progress.epoch));
      std::printf("resumed from %s after epoch %lld\n", checkpoint.c_str(), static_cast<long long>(progress.epoch));
    }
    std::printf("%lld parameters, %lld steps per epoch on %s\n", static_cast<long long>(model->num_parameters()),
                static_cast<long long>(steps_per_epoch), device.str().c_str());

    examples::Progress bar(epochs * steps_per_epoch, log_every, progress.step);
    const auto start = std::chrono::steady_clock::now();
    Evaluation result;
    double samples_per_second = 0;
    for (int64_t epoch = progress.epoch + 1; epoch <= epochs; ++epoch) {
      const auto epoch_start = std::chrono::steady_clock::now();
      Tensor loss_sum = zeros({}, {.device = device});
      int64_t step_in_epoch = 0;
      for (auto& [x, y] : train.epoch(epoch)) {
        if (step_in_epoch++ == steps_per_epoch) break;
        Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
        opt.zero_grad();
        loss.backward();
        opt.step();
        schedule.step();
        loss_sum = loss_sum + loss.detach();
        ++progress.step;
        // Reading the loss synchronises a GPU: only when a line is printed.
        if (progress.step % log_every == 0) {
          const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
          const int64_t done = progress.step - (epoch - 1) * steps_per_epoch;
          bar.update(progress.step, loss.item(), done * batch_size / elapsed);
        }
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start).count();
      samples_per_second = steps_per_epoch * batch_size / seconds;
      result = evaluate(*model, test);
      bar.finish_line();
      const double train_loss = loss_sum.item() / steps_per_epoch;
      std::printf("epoch %lld  train loss %.4f  test loss %.4f  test accuracy %.2f%%  %.0f samples/s\n",
                  static_cast<long long>(epoch), train_loss, result.loss, 100 * result.accuracy, samples_per_second);
      progress.epoch = epoch;
      optim::save_training_checkpoint(checkpoint, *model, opt, progress);
      csv.append({static_cast<double>(epoch), static_cast<double>(progress.step), train_loss, result.loss,
                  result.accuracy, samples_per_second,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
      if (epoch == stop_after_epoch) {
        std::printf("stopping after epoch %lld; continue with --resume\n", static_cast<long long>(epoch));
        return 0;
      }
    }
    if (progress.epoch >= epochs && result.accuracy == 0) result = evaluate(*model, test);  // nothing left to train
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("RESULT {\"example\": \"fashion_mnist_cnn\", \"epochs\": %d, \"test_accuracy\": %.4f, "
                "\"test_loss\": %.4f, \"samples_per_s\": %.1f, \"seconds\": %.1f, \"device\": \"%s\"}\n",
                epochs, result.accuracy, result.loss, samples_per_second, seconds, device.str().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "fashion_mnist_cnn: %s\n", e.what());
    return 1;
  }
  return 0;
}
