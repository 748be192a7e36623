#include "examples/common/fashion_mnist_training.h"

#include <chrono>
#include <cstdio>

#include "data/dataloader.h"
#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "examples/common/progress.h"
#include "examples/models/models.h"
#include "optim/lr_scheduler.h"
#include "optim/training_checkpoint.h"
#include "parallel/trace.h"

namespace loom::examples {
namespace {

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

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// --trace: records steps first + 2 to first + 4 (after warm-up) of this run
// and writes them; under mpirun each rank writes its own file.
class StepTracer {
 public:
  StepTracer(std::string path, int rank, int64_t first_step) : path_(std::move(path)), first_(first_step + 2) {
    if (path_.empty() || rank < 0) return;
    const auto dot = path_.rfind('.');
    const std::string suffix = ".rank" + std::to_string(rank);
    path_ = dot == std::string::npos ? path_ + suffix : path_.substr(0, dot) + suffix + path_.substr(dot);
  }
  void before_step(int64_t step) {
    if (step == first_ && !path_.empty()) trace::enable(true);
    if (step == first_ + 3) finish();
  }
  // Writes what was recorded (also when the run had fewer steps).
  void finish() {
    if (path_.empty() || !trace::enabled()) return;
    trace::enable(false);
    trace::write_chrome_trace(path_);
    std::printf("trace of steps %lld-%lld: %s\n", static_cast<long long>(first_ + 1),
                static_cast<long long>(first_ + 3), path_.c_str());
    path_.clear();
  }

 private:
  std::string path_;
  int64_t first_;
};

}  // namespace

void add_fashion_mnist_flags(CLI::App& app, FashionMnistConfig& c) {
  c.data_root = data::FashionMnist::kDefaultRoot;
  app.add_option("--epochs", c.epochs, "passes over the 60,000 training images")->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "images per step, over all replicas or ranks")->capture_default_str();
  app.add_option("--lr", c.lr, "AdamW learning rate (cosine-decayed to 0)")->capture_default_str();
  app.add_option("--width", c.width, "channels of the first convolution (the benchmark CNN's 32: 92% in 5 epochs)")->capture_default_str();
  app.add_option("--device", c.device, "cpu or cuda[:N]")->capture_default_str();
  app.add_option("--data", c.data_root, "folder with the Fashion-MNIST IDX files")->capture_default_str();
  app.add_option("--workers", c.workers, "threads that prepare batches ahead")->capture_default_str();
  app.add_option("--metrics", c.metrics, "metrics CSV, one row per epoch (default: <example>.csv)");
  app.add_option("--checkpoint", c.checkpoint, "checkpoint written after every epoch (default: <example>.safetensors)");
  app.add_option("--trace", c.trace, "Chrome trace JSON of steps 3-5 (under mpirun one file per rank, .rankN added)");
  app.add_flag("--resume", c.resume, "continue from --checkpoint");
  app.add_option("--seed", c.seed, "random seed (weights, shuffling)")->capture_default_str();
  app.add_option("--log-every", c.log_every, "steps between progress lines when not on a terminal")->capture_default_str();
  app.add_option("--max-steps-per-epoch", c.max_steps_per_epoch, "stop each epoch early (0: the whole epoch; for quick checks)")
      ->capture_default_str();
  app.add_option("--stop-after-epoch", c.stop_after_epoch, "exit after this epoch, as if interrupted (0: never)")
      ->capture_default_str();
}

int train_fashion_mnist(FashionMnistConfig c, const Strategy& strategy) {
  if (c.metrics.empty()) c.metrics = c.name + ".csv";
  if (c.checkpoint.empty()) c.checkpoint = c.name + ".safetensors";
  const int rank = strategy.group ? strategy.group->rank() : 0;
  const int world = strategy.group ? strategy.group->size() : 1;
  const bool writer = rank == strategy.reporting_rank;  // prints progress, writes metrics and checkpoints
  const int shards = strategy.shard_batches ? world : 1;  // ranks that share out each global batch
  try {
    LOOM_CHECK(c.batch_size % shards == 0, "--batch-size ", c.batch_size, " does not split evenly over ", shards, " ranks");
    LOOM_CHECK(!(c.resume && world > 1 && !strategy.shard_batches),
               "--resume is not supported for a pipeline over ranks: each rank's optimizer state is its own");
    const Device device = Device::parse(c.device);
    manual_seed(c.seed);  // the same initial weights on every rank (DDP broadcasts rank 0's anyway)

    // Each rank reads batch_size / shards images of every global batch; the
    // DistributedSampler deals out one shuffled order, so together the ranks
    // see exactly the global batches of a single-device run.
    data::DataLoaderOptions train_options{.batch_size = c.batch_size / shards, .num_workers = c.workers, .device = device};
    if (shards > 1) {
      train_options.sampler = data::DistributedSampler(rank, shards, /*shuffle=*/true, c.seed);
    } else {
      train_options.shuffle = true;
      train_options.seed = c.seed;
    }
    data::DataLoader train(data::FashionMnist::train(c.data_root, {.normalize = true}), train_options);
    data::DataLoader test(data::FashionMnist::test(c.data_root, {.normalize = true}),
                          {.batch_size = 1000, .num_workers = c.workers, .device = device});

    nn::Sequential model = models::fashion_cnn(c.width);
    model->to(device);
    optim::AdamW opt(model->parameters(), {.lr = c.lr, .weight_decay = 1e-4});
    const int64_t steps_per_epoch =
        c.max_steps_per_epoch > 0 ? std::min(c.max_steps_per_epoch, train.num_batches()) : train.num_batches();
    optim::CosineAnnealingLR schedule(opt, c.epochs * steps_per_epoch);
    optim::TrainingProgress progress;
    MetricsCsv csv(writer ? c.metrics : "", {"epoch", "step", "train_loss", "test_loss", "test_accuracy", "samples_per_s", "seconds"});
    if (c.resume) {  // every rank loads the same checkpoint
      progress = optim::load_training_checkpoint(c.checkpoint, *model, opt);
      schedule.set_step(progress.step);
      if (writer) csv.load_existing(static_cast<double>(progress.epoch));
      if (writer) std::printf("resumed from %s after epoch %lld\n", c.checkpoint.c_str(), static_cast<long long>(progress.epoch));
    }
    // Wrapped after loading: DDP then broadcasts the loaded weights.
    nn::ModulePtr trained = strategy.wrap(model.ptr());
    if (writer)
      std::printf("%lld parameters, %lld steps per epoch on %s%s\n", static_cast<long long>(model->num_parameters()),
                  static_cast<long long>(steps_per_epoch), device.str().c_str(),
                  world > 1 ? (", " + std::to_string(world) + " ranks").c_str() : "");

    Progress bar(c.epochs * steps_per_epoch, c.log_every, progress.step);
    StepTracer tracer(c.trace, world > 1 ? rank : -1, progress.step);
    const int lane = trace::lane(world > 1 ? "rank " + std::to_string(rank) : "main");
    const auto start = std::chrono::steady_clock::now();
    Evaluation result;
    double samples_per_second = 0;
    for (int64_t epoch = progress.epoch + 1; epoch <= c.epochs; ++epoch) {
      const auto epoch_start = std::chrono::steady_clock::now();
      Tensor loss_sum = zeros({}, {.device = device});
      int64_t step_in_epoch = 0;
      for (auto& [x, y] : train.epoch(epoch)) {
        if (step_in_epoch++ == steps_per_epoch) break;
        tracer.before_step(progress.step);
        Tensor loss;
        if (strategy.train_step) {
          opt.zero_grad();
          loss = strategy.train_step(x, y);
        } else {
          {
            trace::Span span("forward", "compute", lane);
            loss = nn::functional::cross_entropy(trained->forward(x), y);
          }
          opt.zero_grad();
          trace::Span span("backward", "compute", lane);
          loss.backward();
        }
        {
          trace::Span span("optimizer", "optimizer", lane);
          opt.step();
        }
        schedule.step();
        if (loss.defined()) loss_sum = loss_sum + loss.detach();  // a pipeline's loss: on its last rank
        ++progress.step;
        // Reading the loss synchronises a GPU: only when a line is printed.
        if (writer && progress.step % c.log_every == 0) {
          const int64_t done = progress.step - (epoch - 1) * steps_per_epoch;
          bar.update(progress.step, loss.item(), done * c.batch_size / seconds_since(epoch_start));
        }
      }
      tracer.finish();
      const double seconds = seconds_since(epoch_start);
      samples_per_second = steps_per_epoch * c.batch_size / seconds;
      // Every rank evaluates the whole test set: they hold the same weights.
      if (strategy.before_evaluation) strategy.before_evaluation();
      result = evaluate(*model, test);
      if (strategy.group && shards > 1) strategy.group->all_reduce(loss_sum, parallel::ReduceOp::Avg)->wait();
      const double train_loss = loss_sum.item() / steps_per_epoch;
      progress.epoch = epoch;
      if (writer) {
        bar.finish_line();
        std::printf("epoch %lld  train loss %.4f  test loss %.4f  test accuracy %.2f%%  %.0f samples/s\n",
                    static_cast<long long>(epoch), train_loss, result.loss, 100 * result.accuracy, samples_per_second);
        optim::save_training_checkpoint(c.checkpoint, *model, opt, progress);
        csv.append({static_cast<double>(epoch), static_cast<double>(progress.step), train_loss, result.loss,
                    result.accuracy, samples_per_second, seconds_since(start)});
      }
      if (epoch == c.stop_after_epoch) {
        if (writer) std::printf("stopping after epoch %lld; continue with --resume\n", static_cast<long long>(epoch));
        return 0;
      }
    }
    if (progress.epoch >= c.epochs && result.accuracy == 0) {  // nothing left to train
      if (strategy.before_evaluation) strategy.before_evaluation();
      result = evaluate(*model, test);
    }
    if (writer)
      std::printf("RESULT {\"example\": \"%s\", \"epochs\": %d, \"test_accuracy\": %.4f, "
                  "\"test_loss\": %.4f, \"samples_per_s\": %.1f, \"seconds\": %.1f, \"device\": \"%s\", \"ranks\": %d}\n",
                  c.name.c_str(), c.epochs, result.accuracy, result.loss, samples_per_second, seconds_since(start),
                  device.str().c_str(), world);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s (rank %d): %s\n", c.name.c_str(), rank, e.what());
    return 1;
  }
  return 0;
}

}  // namespace loom::examples
