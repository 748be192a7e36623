#include "examples/common/fashion_mnist.h"

#include <cstdio>

#include "bench/mfu.h"
#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "examples/common/result.h"
#include "examples/models/models.h"
#include "nn/functional.h"
#include "parallel/trace.h"
#include "tensor/file_io.h"
#include "tensor/stopwatch.h"

namespace loom::examples {

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
  flags.add("--device", c.device, "cpu, cuda:N, or cuda (under mpirun: each rank its local GPU)", Scope::Rank,
            device_name());
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

namespace {

using Clock = std::chrono::steady_clock;

int rank_of(const Ranks& r) { return r.group ? r.group->rank() : 0; }
int world_of(const Ranks& r) { return r.group ? r.group->size() : 1; }
// Ranks that share out each global batch.
int shards_of(const Ranks& r) { return r.shard_batches ? world_of(r) : 1; }

// The settings checks that need no data, before anything is loaded.
FashionMnistConfig checked(FashionMnistConfig c, const Ranks& ranks) {
  if (c.metrics.empty()) c.metrics = c.name + ".csv";
  if (c.checkpoint.empty()) c.checkpoint = c.name + ".safetensors";
  LOOM_CHECK(c.batch_size % shards_of(ranks) == 0, "--batch-size ", c.batch_size, " does not split evenly over ",
             shards_of(ranks), " ranks");
  LOOM_CHECK(c.stop_after_epoch <= c.epochs, "--stop-after-epoch ", c.stop_after_epoch, " is after the last epoch (",
             "--epochs ", c.epochs, ")");
  return c;
}

// Each rank reads batch_size / shards images of every global batch; the
// DistributedSampler deals out one shuffled order, so together the ranks see
// exactly the global batches of a single-device run.
data::DataLoader train_loader(const FashionMnistConfig& c, Device device, const Ranks& ranks) {
  const int shards = shards_of(ranks);
  data::DataLoaderOptions options{.batch_size = c.batch_size / shards, .num_workers = c.workers, .device = device};
  if (shards > 1) {
    options.sampler = data::DistributedSampler(rank_of(ranks), shards, /*shuffle=*/true, c.seed);
  } else {
    options.shuffle = true;
    options.seed = c.seed;
  }
  return data::DataLoader(data::FashionMnist::train(c.data_root, {.normalize = true}), options);
}

nn::Sequential cnn_on(const FashionMnistConfig& c, Device device) {
  manual_seed(c.seed);  // the same initial weights on every rank (DDP broadcasts rank 0's anyway)
  nn::Sequential model = models::fashion_cnn(c.width);
  model->to(device);
  return model;
}

Evaluation evaluate(nn::Module& model, const data::DataLoader& loader) {
  NoGradGuard no_grad;
  model.eval();
  // Summed on the device and read once at the end: a read per batch would
  // make the host wait for the GPU each time.
  const Device device = loader.options().device;
  Tensor loss = zeros({}, {.dtype = kFloat64, .device = device});
  Tensor correct = zeros({}, {.dtype = kInt64, .device = device});
  int64_t seen = 0;
  for (auto& [x, y] : loader.epoch(0)) {
    Tensor logits = model.forward(x);
    loss.add_(nn::functional::cross_entropy(logits, y, {.reduction = nn::functional::Reduction::Sum}).to(kFloat64));
    correct.add_(sum(argmax(logits, 1) == y));
    seen += y.size(0);
  }
  model.train();
  return {loss.item() / seen, static_cast<double>(correct.item<int64_t>()) / seen};
}

}  // namespace

// --trace: records three steps after two of warm-up, and writes them; under
// mpirun each rank writes its own file (.rankN inserted).
class FashionMnist::StepTracer {
 public:
  StepTracer(std::string path, int rank, int64_t first_step) : path_(std::move(path)), first_(first_step + 2) {
    if (path_.empty()) return;
    if (rank >= 0) {
      const auto dot = path_.rfind('.');
      const std::string suffix = ".rank" + std::to_string(rank);
      path_ = dot == std::string::npos ? path_ + suffix : path_.substr(0, dot) + suffix + path_.substr(dot);
    }
    AtomicFile::check_writable(path_, "--trace");
  }
  // After step `step` (1-based).
  void step_done(int64_t step) {
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

FashionMnist::FashionMnist(FashionMnistConfig config, const Flags& flags, Device device, Ranks ranks)
    : config_(checked(std::move(config), ranks)),
      device_(device),
      ranks_(std::move(ranks)),
      model(cnn_on(config_, device)),
      optimizer(model->parameters(), {.lr = config_.lr, .weight_decay = 1e-4, .capturable = config_.cuda_graph}),
      train_(train_loader(config_, device, ranks_)),
      test_(data::FashionMnist::test(config_.data_root, {.normalize = true}),
            {.batch_size = 1000, .num_workers = config_.workers, .device = device}) {
  const FashionMnistConfig& c = config_;
  record_ = std::make_unique<RunRecord>(RunRecord::Options{
      .checkpoint = c.checkpoint,
      .metrics = reporting() ? c.metrics : "",
      .columns = {"epoch", "step", "train_loss", "test_loss", "test_accuracy", "samples_per_s", "seconds"},
      .settings = flags.settings({Scope::Run}),
      .writer = {.program = c.name, .layout = ranks_.layout}});
  if (reporting()) record_->check_writable();

  const int64_t images = train_.dataset().size();
  LOOM_CHECK(c.batch_size <= images, "--batch-size ", c.batch_size, " is more than the ", images,
             " training images in ", c.data_root);
  LOOM_CHECK(test_.dataset().size() > 0, "the test set in ", c.data_root, " is empty: nothing to evaluate on");
  steps_per_epoch_ = c.max_steps_per_epoch > 0 ? std::min(c.max_steps_per_epoch, train_.num_batches())
                                               : train_.num_batches();
  // The last batch of an epoch is short unless the batches divide the data (or the epoch stops before it).
  const int64_t remainder = images % c.batch_size;
  const int64_t smallest = remainder > 0 && steps_per_epoch_ == train_.num_batches() ? remainder : c.batch_size;
  LOOM_CHECK(smallest >= ranks_.min_batch, "--batch-size ", c.batch_size, " makes a batch of ", smallest,
             " images, fewer than the ", ranks_.min_batch, " this strategy needs (one per micro-batch)");

  schedule_.emplace(optimizer, c.epochs * steps_per_epoch_);
  if (c.resume) {  // every rank loads the same checkpoint
    progress_ = record_->resume(*model, optimizer);
    LOOM_CHECK(progress_.epoch <= c.epochs && progress_.step == progress_.epoch * steps_per_epoch_, "checkpoint ",
               c.checkpoint, " says epoch ", progress_.epoch, " and step ", progress_.step, ", which a run of ",
               c.epochs, " epochs of ", steps_per_epoch_, " steps never writes");
    schedule_->set_step(progress_.step);
    if (reporting())
      std::printf("resumed from %s after epoch %lld\n", c.checkpoint.c_str(), static_cast<long long>(progress_.epoch));
  }
  const int world = world_of(ranks_);
  if (reporting())
    std::printf("%lld parameters, %lld steps per epoch on %s%s\n", static_cast<long long>(model->num_parameters()),
                static_cast<long long>(steps_per_epoch_), device.str().c_str(),
                world > 1 ? (", " + std::to_string(world) + " ranks").c_str() : "");
  bar_ = std::make_unique<Progress>(c.epochs * steps_per_epoch_, c.log_every, progress_.step);
  tracer_ = std::make_unique<StepTracer>(c.trace, world > 1 ? rank_of(ranks_) : -1, progress_.step);
  loss_sum_ = zeros({}, {.device = device});
  trace_lane_ = trace::lane(world > 1 ? "rank " + std::to_string(rank_of(ranks_)) : "main");
  if (reporting()) {
    // The peak first (the CPU's is a few GEMMs), then the first step counts.
    peak_flops_ = bench::device_peak(device, "fp32").flops_per_s;
    counting_ = std::make_unique<FlopCounter::Scope>(step_flops_);
  }
  step_begin_us_ = trace::now_us();
  start_ = epoch_start_ = Clock::now();
}

FashionMnist::~FashionMnist() = default;

bool FashionMnist::reporting() const { return rank_of(ranks_) == ranks_.reporting_rank; }

void FashionMnist::step_done(const Tensor& loss) {
  const int64_t now = trace::now_us();  // each step is a span of the trace (the library adds its own inside)
  if (trace::enabled()) trace::record("step", "compute", trace_lane_, step_begin_us_, now);
  step_begin_us_ = now;
  schedule_->step();
  if (loss.defined()) loss_sum_ = loss_sum_ + loss.detach();
  ++progress_.step;
  tracer_->step_done(progress_.step);
  if (counting_) {
    // This rank's FLOPs a step over the (global) batch: times the samples/s
    // the line shows, the FLOP/s of this rank's device.
    counting_.reset();
    bar_->set_flops(step_flops_.total() / double(config_.batch_size), peak_flops_);
  }
  // Reading the loss waits for the GPU: only when a line is printed.
  if (reporting() && progress_.step % config_.log_every == 0) {
    const int64_t done = progress_.step - progress_.epoch * steps_per_epoch_;
    bar_->update(progress_.step, loss.item(), done * config_.batch_size / seconds_since(epoch_start_));
  }
}

bool FashionMnist::end_epoch(int64_t epoch) {
  tracer_->finish();
  const double seconds = seconds_since(epoch_start_);
  samples_per_second_ = steps_per_epoch_ * config_.batch_size / seconds;
  // Every rank evaluates the whole test set: they hold the same weights.
  result_ = evaluate(*model, test_);
  if (ranks_.group && shards_of(ranks_) > 1) ranks_.group->all_reduce(loss_sum_, parallel::ReduceOp::Avg)->wait();
  const double train_loss = loss_sum_.item() / steps_per_epoch_;
  loss_sum_ = zeros({}, {.device = device_});
  progress_.epoch = epoch;
  if (reporting()) {
    bar_->finish_line();
    std::printf("epoch %lld  train loss %.4f  test loss %.4f  test accuracy %.2f%%  %.0f samples/s\n",
                static_cast<long long>(epoch), train_loss, result_->loss, 100 * result_->accuracy, samples_per_second_);
    record_->commit_epoch(*model, optimizer, progress_,
                          {static_cast<double>(epoch), static_cast<double>(progress_.step), train_loss, result_->loss,
                           result_->accuracy, samples_per_second_, seconds_since(start_)});
  }
  epoch_start_ = Clock::now();
  if (epoch != config_.stop_after_epoch) return true;
  if (reporting()) std::printf("stopping after epoch %lld; continue with --resume\n", static_cast<long long>(epoch));
  return false;
}

void FashionMnist::finish() {
  if (progress_.epoch < config_.epochs) return;  // stopped early: no result yet
  if (!result_) result_ = evaluate(*model, test_);  // resumed with nothing left to train
  if (reporting())
    print_result({{"example", config_.name},
                  {"epochs", config_.epochs},
                  {"test_accuracy", result_->accuracy},
                  {"test_loss", result_->loss},
                  {"samples_per_s", samples_per_second_},
                  {"seconds", seconds_since(start_)},
                  {"device", device_.str()},
                  {"ranks", world_of(ranks_)}});
}

}  // namespace loom::examples
