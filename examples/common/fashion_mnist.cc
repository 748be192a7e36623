#include "examples/common/fashion_mnist.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "examples/common/result.h"
#include "examples/common/run_files.h"
#include "examples/common/tensorboard_scalars.h"
#include "examples/models/models.h"
#include "nn/functional.h"
#include "parallel/planner/mfu.h"
#include "parallel/trace.h"
#include "tensor/file_io.h"
#include "tensor/memory_budget.h"
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
  flags.add_switch("--async-checkpoint", c.async_checkpoint,
                   "write checkpoints on a background thread: a commit costs training a copy of the state, not the "
                   "write (a stop's commit is still waited for)",
                   Scope::Job);
  flags.add("--device", c.device, "cpu, cuda:N, or cuda (under mpirun: each rank its local GPU)", Scope::Rank,
            device_name());
  flags.add("--data", c.data_root, "folder with the Fashion-MNIST IDX files", Scope::Rank);
  flags.add("--workers", c.workers, "threads that prepare batches ahead", Scope::Rank, integer_in(0, 256));
  flags.add("--metrics", c.metrics, "metrics CSV, one row per epoch (default: <example>.csv)", Scope::Rank);
  flags.add("--checkpoint", c.checkpoint, "checkpoint written after every epoch (default: <example>.safetensors)",
            Scope::Rank);
  flags.add("--trace", c.trace, "Chrome trace JSON of steps 3-5 (under mpirun one file per rank, .rankN added)",
            Scope::Rank);
  flags.add("--tensorboard", c.tensorboard,
            "folder for TensorBoard event files: loss, lr, throughput, memory (docs/examples.md lists the tags)",
            Scope::Rank);
  flags.add("--log-every", c.log_every, "steps between progress lines when not on a terminal", Scope::Rank,
            integer_in(1, INT32_MAX));
}

namespace {

using Clock = std::chrono::steady_clock;

// A checkpoint written mid-epoch holds each rank's running sum of the
// epoch's train losses, so that the epoch's mean comes out as an
// uninterrupted run's: float32 values as exact hexadecimal text, in rank
// order ("0x1.2p+3,0x1.8p+2").
const std::string kEpochLossSums = "epoch_loss_sums";

std::string loss_sums_text(const std::vector<float>& sums) {
  std::string out;
  for (float sum : sums) {
    char text[32];
    if (!out.empty()) out += ',';
    out.append(text, std::to_chars(text, text + sizeof(text), sum, std::chars_format::hex).ptr);
  }
  return out;
}

std::vector<float> parse_loss_sums(const std::string& text, const std::string& path) {
  std::vector<float> sums;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    float sum = 0;
    const auto [stop, error] = std::from_chars(text.data() + begin, text.data() + end, sum, std::chars_format::hex);
    LOOM_CHECK(end > begin && error == std::errc() && stop == text.data() + end && std::isfinite(sum), "checkpoint ",
               path, ": metadata '", kEpochLossSums, "' is '", text, "', not a list of hexadecimal floats");
    sums.push_back(sum);
    begin = end + 1;
  }
  return sums;
}

int rank_of(const Ranks& r) { return r.group ? r.group->rank() : 0; }
int world_of(const Ranks& r) { return r.group ? r.group->size() : 1; }
// Ranks that share out each global batch.
int shards_of(const Ranks& r) { return r.shard_batches ? world_of(r) : 1; }

// --trace's file on this rank: under mpirun .rankN goes before the file name's extension.
std::string trace_path(const std::string& path, const Ranks& ranks) {
  if (path.empty() || world_of(ranks) == 1) return path;
  const size_t slash = path.rfind('/'), name = slash == std::string::npos ? 0 : slash + 1, dot = path.rfind('.');
  const bool extension = dot != std::string::npos && dot > name;  // not a folder's dot, nor a hidden file's
  const std::string suffix = ".rank" + std::to_string(rank_of(ranks));
  return extension ? path.substr(0, dot) + suffix + path.substr(dot) : path + suffix;
}

// Processes of this job that share this machine's memory.
int processes_here(const Ranks& r) { return r.group ? processes_on_this_machine() : 1; }

// The settings checks that need no data, before anything is loaded.
FashionMnistConfig checked(FashionMnistConfig c, Device device, const Ranks& ranks) {
  if (c.metrics.empty()) c.metrics = c.name + ".csv";
  if (c.checkpoint.empty()) c.checkpoint = c.name + ".safetensors";
  c.trace = trace_path(c.trace, ranks);
  // No output may be another, or replace what the run reads (every rank checks what it was given).
  RunFiles files;
  files.reads_folder("--data", c.data_root);
  if (c.resume) files.reads("--checkpoint", c.checkpoint);
  files.writes("--checkpoint", c.checkpoint);
  files.writes("--metrics", c.metrics);
  if (!c.trace.empty()) files.writes("--trace", c.trace);
  if (!c.tensorboard.empty()) files.writes("--tensorboard", c.tensorboard);
  files.check();
  // The model's own memory, before it is built (--width 4096 is 27 GB of weights alone). A GPU
  // that runs out says so (OutOfMemoryError); the host's kernel kills without a word.
  if (device.is_cpu())
    check_fits_in_memory({.flag = "--width",
                          .value = c.width,
                          .bytes = [](int64_t w) { return int64_t{16} * models::fashion_cnn_num_parameters(w); },
                          .what = "for the model (float32 weights, gradients and AdamW's two moments)",
                          .copies = processes_here(ranks)},
                         available_memory());
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

// The pre-flight check of a training step at --batch-size, before the first
// (tensor/memory_budget.h): a step measured on the model at two
// small batches, scaled to this rank's share of the batch, plus AdamW's two
// moments, the batches the loader prepares ahead, and an evaluation batch.
void check_step_memory(nn::Module& model, const optim::Optimizer& optimizer, const FashionMnistConfig& c,
                       Device device, const Ranks& ranks, const data::DataLoader& train, int64_t eval_batch) {
  const GeneratorState generator = default_generator().state();  // the run draws as if nothing happened
  const auto images = [&](int64_t n) { return zeros({n, 1, 28, 28}, {.device = device}); };
  const StepMemory step = measure_step_memory(device, c.batch_size / shards_of(ranks), [&](int64_t n) {
    nn::functional::cross_entropy(model.forward(images(n)), zeros({n}, {.dtype = kInt64, .device = device}))
        .backward();
    for (Tensor& p : model.parameters()) p.set_grad(Tensor());
  });
  const StepMemory evaluation = measure_step_memory(device, eval_batch, [&](int64_t n) {
    NoGradGuard no_grad;
    model.forward(images(n));
  });
  default_generator().set_state(generator);
  int64_t parameter_bytes = 0;
  for (const Tensor& p : model.parameters()) parameter_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  const int64_t state = static_cast<int64_t>(optimizer.state_names().size()) * parameter_bytes;
  const data::DataLoaderOptions& loading = train.options();
  const int64_t ahead = int64_t{loading.num_workers} * (loading.prefetch_batches + 1) + 1;  // batches held at once
  const int64_t sample_bytes = 28 * 28 * 4 + 8;  // an image and its label
  const int shards = shards_of(ranks);
  check_fits_in_memory({.flag = "--batch-size",
                        .value = c.batch_size,
                        .bytes =
                            [&](int64_t batch) {
                              const int64_t mine = batch / shards;
                              return step.at(mine) + state + ahead * mine * sample_bytes + evaluation.at(eval_batch);
                            },
                        .what = "for a training step (activations, gradients, AdamW's state, the batches loaded "
                                "ahead, an evaluation batch)",
                        .copies = processes_here(ranks),
                        .smallest = shards * std::max<int64_t>(1, ranks.min_batch),
                        .multiple_of = shards,
                        .otherwise = "a smaller --width"},
                       available_memory());
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

// --trace: records three steps after two of warm-up, and writes them to
// `path` (under mpirun each rank its own file: trace_path).
class FashionMnist::StepTracer {
 public:
  StepTracer(std::string path, int64_t first_step) : path_(std::move(path)), first_(first_step + 2) {
    if (!path_.empty()) AtomicFile::check_writable(path_, "--trace");
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
    : config_(checked(std::move(config), device, ranks)),
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
      .writer = {.program = c.name, .layout = ranks_.layout},
      .async = c.async_checkpoint});
  if (reporting()) record_->check_writable();
  if (reporting() && !c.tensorboard.empty()) board_ = std::make_unique<tensorboard::SummaryWriter>(c.tensorboard);

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
  if (device.is_cpu()) check_step_memory(*model, optimizer, c, device, ranks_, train_, test_.options().batch_size);

  schedule_.emplace(optimizer, c.epochs * steps_per_epoch_);
  if (c.resume) {  // every rank loads the same checkpoint
    progress_ = record_->resume(*model, optimizer);
    // After epoch e, or after step k of epoch e + 1 (a stop), never after the last epoch's end.
    const int64_t into = progress_.step - progress_.epoch * steps_per_epoch_;
    LOOM_CHECK(progress_.epoch <= c.epochs && into >= 0 && into < steps_per_epoch_ &&
                   (into == 0 || progress_.epoch < c.epochs),
               "checkpoint ", c.checkpoint, " says epoch ", progress_.epoch, " and step ", progress_.step,
               ", which a run of ", c.epochs, " epochs of ", steps_per_epoch_, " steps never writes");
    schedule_->set_step(progress_.step);
    if (into > 0) resume_mid_epoch(into);
    progress_.extra.erase(kEpochLossSums);  // the epoch's end commits without it, as an uninterrupted run does
    if (reporting() && into == 0)
      std::printf("resumed from %s after epoch %lld\n", c.checkpoint.c_str(), static_cast<long long>(progress_.epoch));
    if (reporting() && into > 0)
      std::printf("resumed from %s after step %lld (epoch %lld: %lld of %lld steps)\n", c.checkpoint.c_str(),
                  static_cast<long long>(progress_.step), static_cast<long long>(progress_.epoch + 1),
                  static_cast<long long>(into), static_cast<long long>(steps_per_epoch_));
  }
  const int world = world_of(ranks_);
  if (reporting())
    std::printf("%lld parameters, %lld steps per epoch on %s%s\n", static_cast<long long>(model->num_parameters()),
                static_cast<long long>(steps_per_epoch_), device.str().c_str(),
                world > 1 ? (", " + std::to_string(world) + " ranks").c_str() : "");
  bar_ = std::make_unique<Progress>(c.epochs * steps_per_epoch_, c.log_every, progress_.step);
  tracer_ = std::make_unique<StepTracer>(c.trace, progress_.step);
  if (!loss_sum_.defined()) loss_sum_ = zeros({}, {.device = device});
  // On the CPU the ranks agree on a stop at every step for free (the check
  // overlaps the next step); on a GPU reading the flag waits for the device,
  // so they agree when the progress line reads the loss anyway.
  stop_ = std::make_unique<StopAgreement>(ranks_.group, device, device.is_cpu() ? 1 : c.log_every);
  install_stop_handlers();
  epoch_first_step_ = progress_.step;
  trace_lane_ = trace::lane(world > 1 ? "rank " + std::to_string(rank_of(ranks_)) : "main");
  if (reporting()) {
    // The peak first (the CPU's is a few GEMMs), then the first step counts.
    peak_flops_ = parallel::device_peak(device, "fp32").flops_per_s;
    counting_ = std::make_unique<FlopCounter::Scope>(step_flops_);
  }
  step_begin_us_ = trace::now_us();
  start_ = epoch_start_ = Clock::now();
}

FashionMnist::~FashionMnist() = default;

bool FashionMnist::reporting() const { return rank_of(ranks_) == ranks_.reporting_rank; }

// The checkpoint stopped `into` steps into epoch progress_.epoch + 1: that
// epoch starts at batch `into`, and this rank's loss sum at its own saved
// one. At another world size (DDP resumes at any) no rank's sum is its own:
// each takes the epoch's train loss so far, which the epoch's end then
// averages with the rest (the same value, not the same bits: the sums add
// in another order, as the whole run does at another world size).
void FashionMnist::resume_mid_epoch(int64_t into) {
  const std::string& path = config_.checkpoint;
  auto saved = progress_.extra.find(kEpochLossSums);
  LOOM_CHECK(saved != progress_.extra.end(), "checkpoint ", path, " stops after step ", progress_.step,
             " inside epoch ", progress_.epoch + 1, " but lacks its '", kEpochLossSums,
             "' (written by an older loom?): start afresh without --resume");
  const std::vector<float> sums = parse_loss_sums(saved->second, path);
  float mine = 0;
  if (static_cast<int>(sums.size()) == world_of(ranks_)) {
    mine = sums[rank_of(ranks_)];
  } else {
    double total = 0;
    for (float sum : sums) total += sum;
    // Ranks that share out the batches (the same layout wrote the file) average
    // their sums at the epoch's end; otherwise the reporting rank alone has
    // the loss (the others' sums are 0).
    mine = static_cast<float>(ranks_.shard_batches ? total / sums.size() : total);
  }
  loss_sum_ = full({}, mine, {.device = device_});
  resumed_epoch_ = progress_.epoch + 1;
  resumed_batch_ = into;
}

bool FashionMnist::step_done(const Tensor& loss) {
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
    const int64_t done = progress_.step - epoch_first_step_;
    const double value = loss.item(), samples_per_second = done * config_.batch_size / seconds_since(epoch_start_);
    bar_->update(progress_.step, value, samples_per_second);
    if (board_)
      log_step(*board_, progress_.step, value, optimizer.lr(), "throughput(samples_per_s)", samples_per_second,
               bar_->mfu(samples_per_second), device_);
  }
  if (reporting()) record_->check();  // an async commit that failed ends the run here, not silently
  stopping_ = stop_->stop_after(progress_.step);
  return !stopping_;
}

// Every rank takes part: the sums travel to the reporting rank, which
// commits and says so, and the others wait for its commit before they
// return kExitPreempted: mpirun ends the whole job when the first rank
// exits with a status other than 0, and must not end it mid-write.
void FashionMnist::commit_stop() {
  const bool over_ranks = ranks_.group && ranks_.group->size() > 1;
  std::vector<float> sums{loss_sum_.item<float>()};
  if (over_ranks) {
    std::vector<Tensor> all;
    for (int r = 0; r < ranks_.group->size(); ++r) all.push_back(zeros({}, {.device = device_}));
    ranks_.group->all_gather(all, loss_sum_)->wait();
    sums.clear();
    for (const Tensor& sum : all) sums.push_back(sum.item<float>());
  }
  if (reporting()) commit_stop_checkpoint(sums);
  if (over_ranks) ranks_.group->barrier()->wait();
}

void FashionMnist::commit_stop_checkpoint(const std::vector<float>& sums) {
  optim::TrainingProgress progress = progress_;
  progress.extra[kEpochLossSums] = loss_sums_text(sums);
  record_->commit_step(*model, optimizer, progress);
  record_->wait();  // async or not, the file is in place before the run says so and exits
  bar_->finish_line();
  const int signal = stop_signal();
  const int64_t into = progress_.step - progress_.epoch * steps_per_epoch_;
  std::printf("stopped by %s after step %lld (epoch %lld: %lld of %lld steps); checkpoint %s written; "
              "exit status %d; continue with --resume\n",
              signal ? signal_name(signal).c_str() : "another rank's signal", static_cast<long long>(progress_.step),
              static_cast<long long>(progress_.epoch + 1), static_cast<long long>(into),
              static_cast<long long>(steps_per_epoch_), config_.checkpoint.c_str(), kExitPreempted);
}

bool FashionMnist::end_epoch(int64_t epoch) {
  tracer_->finish();
  if (stopping_ && progress_.step < epoch * steps_per_epoch_) {
    commit_stop();
    return false;
  }
  if (epoch == config_.epochs) stopping_ = false;  // a stop after the last step: the run is complete
  const double seconds = seconds_since(epoch_start_);
  samples_per_second_ = (progress_.step - epoch_first_step_) * config_.batch_size / seconds;
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
    if (board_) {
      board_->add_scalar("loss_metrics/global_avg_loss", train_loss, progress_.step);  // the epoch's, over all ranks
      board_->add_scalar("validation_metrics/loss", result_->loss, progress_.step);
      board_->add_scalar("validation_metrics/accuracy", result_->accuracy, progress_.step);
      board_->flush();
    }
    record_->commit_epoch(*model, optimizer, progress_,
                          {static_cast<double>(epoch), static_cast<double>(progress_.step), train_loss, result_->loss,
                           result_->accuracy, samples_per_second_, seconds_since(start_)});
  }
  epoch_start_ = Clock::now();
  epoch_first_step_ = progress_.step;
  if (stopping_) {  // after the epoch's last step: its commit is the stop's, waited for as commit_stop's
    const int signal = stop_signal();
    if (reporting()) {
      record_->wait();
      std::printf("stopped by %s after epoch %lld (step %lld); checkpoint %s written; exit status %d; "
                  "continue with --resume\n",
                  signal ? signal_name(signal).c_str() : "another rank's signal", static_cast<long long>(epoch),
                  static_cast<long long>(progress_.step), config_.checkpoint.c_str(), kExitPreempted);
    }
    if (ranks_.group && ranks_.group->size() > 1) ranks_.group->barrier()->wait();
    return false;
  }
  if (epoch != config_.stop_after_epoch) return true;
  if (reporting()) std::printf("stopping after epoch %lld; continue with --resume\n", static_cast<long long>(epoch));
  return false;
}

int FashionMnist::finish() {
  if (reporting()) record_->wait();  // the last async commit is in place (or its error thrown) before the end
  if (stopping_) return kExitPreempted;
  if (progress_.epoch < config_.epochs) return 0;  // stopped early (--stop-after-epoch): no result yet
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
  return 0;
}

}  // namespace loom::examples
