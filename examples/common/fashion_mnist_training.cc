#include "examples/common/fashion_mnist_training.h"

#include <chrono>
#include <cstdio>

#include "data/dataloader.h"
#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "examples/common/progress.h"
#include "examples/common/result.h"
#include "examples/common/run_record.h"
#include "examples/models/models.h"
#include "optim/lr_scheduler.h"
#include "optim/training_checkpoint.h"
#include "parallel/trace.h"
#include "tensor/file_io.h"

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
  // Checks now that the trace can be written (rank < 0: one process).
  StepTracer(std::string path, int rank) : path_(std::move(path)) {
    if (path_.empty()) return;
    if (rank >= 0) {
      const auto dot = path_.rfind('.');
      const std::string suffix = ".rank" + std::to_string(rank);
      path_ = dot == std::string::npos ? path_ + suffix : path_.substr(0, dot) + suffix + path_.substr(dot);
    }
    AtomicFile::check_writable(path_, "--trace");
  }
  void start_at(int64_t first_step) { first_ = first_step + 2; }
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
  int64_t first_ = 2;
};

}  // namespace

void add_fashion_mnist_flags(Flags& flags, FashionMnistConfig& c) {
  c.data_root = data::FashionMnist::kDefaultRoot;
  flags.add("--epochs", c.epochs, "passes over the 60,000 training images", Scope::Run, integer_in(1, 100000));
  flags.add("--batch-size", c.batch_size, "images per step, over all replicas or ranks", Scope::Run,
            integer_in<int64_t>(1, 60000));
  flags.add("--lr", c.lr, "AdamW learning rate (cosine-decayed to 0)", Scope::Run, number_in(0, 1e6));
  flags.add("--width", c.width, "channels of the first convolution (the benchmark CNN's 32: 92% in 5 epochs)",
            Scope::Run, integer_in(1, 4096));
  flags.add("--seed", c.seed, "random seed (weights, shuffling)", Scope::Run);
  flags.add("--max-steps-per-epoch", c.max_steps_per_epoch,
            "stop each epoch early (0: the whole epoch; for quick checks)", Scope::Run,
            integer_in<int64_t>(0, INT64_MAX));
  flags.add("--stop-after-epoch", c.stop_after_epoch, "exit after this epoch, as if interrupted (0: never)",
            Scope::Job, integer_in<int64_t>(0, INT64_MAX));
  flags.add_switch("--resume", c.resume, "continue from --checkpoint", Scope::Job);
  flags.add("--device", c.device, "cpu or cuda[:N]", Scope::Rank);
  flags.add("--data", c.data_root, "folder with the Fashion-MNIST IDX files", Scope::Rank);
  flags.add("--workers", c.workers, "threads that prepare batches ahead", Scope::Rank, integer_in(0, 256));
  flags.add("--metrics", c.metrics, "metrics CSV, one row per epoch (default: <example>.csv)", Scope::Rank);
  flags.add("--checkpoint", c.checkpoint, "checkpoint written after every epoch (default: <example>.safetensors)",
            Scope::Rank);
  flags.add("--trace", c.trace, "Chrome trace JSON of steps 3-5 (under mpirun one file per rank, .rankN added)",
            Scope::Rank);
  flags.add("--log-every", c.log_every, "steps between progress lines when not on a terminal", Scope::Rank,
            integer_in(1, INT32_MAX));
}

void train_fashion_mnist(FashionMnistConfig c, const Flags& flags, const Strategy& strategy) {
  if (c.metrics.empty()) c.metrics = c.name + ".csv";
  if (c.checkpoint.empty()) c.checkpoint = c.name + ".safetensors";
  const int rank = strategy.group ? strategy.group->rank() : 0;
  const int world = strategy.group ? strategy.group->size() : 1;
  const bool writer = rank == strategy.reporting_rank;  // prints progress, writes metrics and checkpoints
  const int shards = strategy.shard_batches ? world : 1;  // ranks that share out each global batch
  LOOM_CHECK(c.batch_size % shards == 0, "--batch-size ", c.batch_size, " does not split evenly over ", shards,
             " ranks");
  LOOM_CHECK(c.stop_after_epoch <= c.epochs, "--stop-after-epoch ", c.stop_after_epoch, " is after the last epoch (",
             "--epochs ", c.epochs, ")");
  LOOM_CHECK(!(c.resume && world > 1 && !strategy.shard_batches),
             "--resume is not supported for a pipeline over ranks: each rank's optimizer state is its own");
  const Device device = Device::parse(c.device);
  RunRecord record({.checkpoint = c.checkpoint,
                    .metrics = writer ? c.metrics : "",
                    .columns = {"epoch", "step", "train_loss", "test_loss", "test_accuracy", "samples_per_s", "seconds"},
                    .settings = flags.settings({Scope::Run})});
  if (writer) record.check_writable();
  StepTracer tracer(c.trace, world > 1 ? rank : -1);
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
  LOOM_CHECK(c.batch_size <= train.dataset().size(), "--batch-size ", c.batch_size, " is more than the ",
             train.dataset().size(), " training images in ", c.data_root);
  // The last batch of an epoch is short unless the batches divide the data (or the epoch stops before it).
  const int64_t remainder = train.dataset().size() % c.batch_size;
  const bool short_last = remainder > 0 && (c.max_steps_per_epoch == 0 || c.max_steps_per_epoch >= train.num_batches());
  const int64_t smallest_batch = short_last ? remainder : c.batch_size;
  LOOM_CHECK(smallest_batch >= strategy.min_batch, "--batch-size ", c.batch_size, " makes a batch of ", smallest_batch,
             " images, fewer than the ", strategy.min_batch, " this strategy needs (one per micro-batch)");
  LOOM_CHECK(test.dataset().size() > 0, "the test set in ", c.data_root, " is empty: nothing to evaluate on");

  nn::Sequential model = models::fashion_cnn(c.width);
  model->to(device);
  optim::AdamW opt(model->parameters(), {.lr = c.lr, .weight_decay = 1e-4});
  const int64_t steps_per_epoch =
      c.max_steps_per_epoch > 0 ? std::min(c.max_steps_per_epoch, train.num_batches()) : train.num_batches();
  optim::CosineAnnealingLR schedule(opt, c.epochs * steps_per_epoch);
  optim::TrainingProgress progress;
  if (c.resume) {  // every rank loads the same checkpoint
    progress = record.resume(*model, opt);
    LOOM_CHECK(progress.epoch <= c.epochs && progress.step == progress.epoch * steps_per_epoch, "checkpoint ",
               c.checkpoint, " says epoch ", progress.epoch, " and step ", progress.step, ", which a run of ", c.epochs,
               " epochs of ", steps_per_epoch, " steps never writes");
    schedule.set_step(progress.step);
    if (writer) std::printf("resumed from %s after epoch %lld\n", c.checkpoint.c_str(), static_cast<long long>(progress.epoch));
  }
  // Wrapped after loading: DDP then broadcasts the loaded weights.
  nn::ModulePtr trained = strategy.wrap(model.ptr());
  if (writer)
    std::printf("%lld parameters, %lld steps per epoch on %s%s\n", static_cast<long long>(model->num_parameters()),
                static_cast<long long>(steps_per_epoch), device.str().c_str(),
                world > 1 ? (", " + std::to_string(world) + " ranks").c_str() : "");

  Progress bar(c.epochs * steps_per_epoch, c.log_every, progress.step);
  tracer.start_at(progress.step);
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
      record.commit_epoch(*model, opt, progress,
                          {static_cast<double>(epoch), static_cast<double>(progress.step), train_loss, result.loss,
                           result.accuracy, samples_per_second, seconds_since(start)});
    }
    if (epoch == c.stop_after_epoch) {
      if (writer) std::printf("stopping after epoch %lld; continue with --resume\n", static_cast<long long>(epoch));
      return;
    }
  }
  if (progress.epoch >= c.epochs && result.accuracy == 0) {  // nothing left to train
    if (strategy.before_evaluation) strategy.before_evaluation();
    result = evaluate(*model, test);
  }
  if (writer)
    print_result({{"example", c.name},
                  {"epochs", c.epochs},
                  {"test_accuracy", result.accuracy},
                  {"test_loss", result.loss},
                  {"samples_per_s", samples_per_second},
                  {"seconds", seconds_since(start)},
                  {"device", device.str()},
                  {"ranks", world}});
}

}  // namespace loom::examples
