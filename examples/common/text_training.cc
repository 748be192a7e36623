#include "examples/common/text_training.h"

#include <cstdio>

#include "data/device_copy.h"
#include "examples/common/progress.h"
#include "examples/common/result.h"
#include "examples/common/tensorboard_scalars.h"
#include "nn/functional.h"
#include "parallel/planner/mfu.h"
#include "tensor/creation.h"
#include "tensor/file_io.h"
#include "tensor/memory_budget.h"
#include "tensor/stopwatch.h"

namespace loom::examples {

data::Batch random_windows(const data::CharDataset& dataset, int64_t batch, Generator& generator, Device device) {
  std::vector<int64_t> offsets(batch);
  for (int64_t& o : offsets) o = static_cast<int64_t>(generator.next_u64() % static_cast<uint64_t>(dataset.size()));
  data::Batch b = dataset.get_batch(offsets);
  if (device.is_cpu()) return b;
  // From pinned memory (as the DataLoader's workers pin theirs) the copies
  // run in the background; from pageable memory the driver stages them itself
  // and may first wait for the GPU.
  b = data::device_copy::pin(std::move(b));
  return {b.input.to(device), b.target.to(device)};
}

Tensor next_token_loss(const Tensor& logits, const Tensor& targets) {
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

void check_text_step_memory(nn::Module& model, const LanguageModel& forward, int64_t batch, int64_t shards,
                            int64_t block_size, int64_t states_per_parameter, Device device,
                            const std::string& otherwise) {
  if (!device.is_cpu()) return;  // a GPU that runs out says so (OutOfMemoryError); the host's kernel kills
  const GeneratorState generator = default_generator().state();  // dropout draws
  // A step, then a loss estimate as the run makes them: every process on the whole batch, without
  // gradients, from the cache the step left (their blocks are mostly of the same sizes).
  const StepMemory step = measure_step_memory(device, batch / shards, [&](int64_t n) {
    const Tensor tokens = zeros({n, block_size}, {.dtype = kInt64, .device = device});
    next_token_loss(forward(tokens), tokens).backward();
    for (Tensor& p : model.parameters()) p.set_grad(Tensor());
    NoGradGuard no_grad;
    forward(zeros({n * shards, block_size}, {.dtype = kInt64, .device = device}));
  });
  default_generator().set_state(generator);
  int64_t parameter_bytes = 0;
  for (const Tensor& p : model.parameters()) parameter_bytes += p.numel() * static_cast<int64_t>(p.element_size());
  const int64_t state = states_per_parameter * parameter_bytes;
  check_fits_in_memory({.flag = "--batch-size",
                        .value = batch,
                        .bytes = [&](int64_t b) { return step.at(b / shards) + state; },
                        .what = "for a training step of " + std::to_string(block_size) +
                                "-token sequences (activations, gradients, the optimizer's state, a loss estimate)",
                        .copies = processes_on_this_machine(),
                        .smallest = shards,
                        .multiple_of = shards,
                        .otherwise = otherwise},
                       available_memory());
}

double estimate_loss(nn::Module& model, const LanguageModel& forward, const data::CharDataset& dataset,
                     int64_t batch, int64_t batches, Device device) {
  NoGradGuard no_grad;
  model.eval();
  Generator fixed(1234);
  // Summed on the device and read once: a read per batch would make the host
  // wait for the GPU each time.
  Tensor total = zeros({}, {.dtype = kFloat64, .device = device});
  for (int64_t i = 0; i < batches; ++i) {
    data::Batch b = random_windows(dataset, batch, fixed, device);
    total.add_(next_token_loss(forward(b.input), b.target).to(kFloat64));
  }
  model.train();
  return total.item() / batches;
}

TextRun::TextRun(TextTrainingConfig config, nn::Module& model, const data::CharDataset& train,
                 const data::CharDataset& validation, LanguageModel logits)
    : config_(std::move(config)),
      model_(model),
      logits_(logits ? std::move(logits) : LanguageModel([&model](const Tensor& idx) { return model.forward(idx); })),
      train_(train),
      validation_(validation),
      csv_(config_.writer ? config_.metrics : std::string(), {"step", "train_loss", "val_loss", "tokens_per_s"}),
      progress_(config_.steps, 50),
      batches_(config_.seed + 1) {
  if (config_.writer && !config_.metrics.empty())
    AtomicFile::check_writable(config_.metrics, "--metrics");  // before hours of training
  if (config_.writer && !config_.tensorboard.empty())
    board_ = std::make_unique<tensorboard::SummaryWriter>(config_.tensorboard);
  if (config_.writer) {
    // The peak first (the CPU's is a few GEMMs, not timed), then the first step counts.
    peak_flops_ = parallel::device_peak(config_.device, "fp32").flops_per_s;
    counting_ = std::make_unique<FlopCounter::Scope>(step_flops_);
    watch_.restart();
  }
}

data::Batch TextRun::next_batch() { return random_windows(train_, config_.batch, batches_, config_.device); }

void TextRun::step_done(int64_t step, const Tensor& loss, double lr) {
  const TextTrainingConfig& c = config_;
  tokens_per_second_ = step * c.batch * c.block_size / watch_.seconds();
  if (counting_) {
    // This rank's FLOPs a step over the batch's sequences: times the line's sequences/s, its FLOP/s.
    counting_.reset();
    progress_.set_flops(step_flops_.total() / double(c.batch), peak_flops_);
  }
  // Reading the loss waits for a GPU: only when a line is printed.
  if (step % 50 == 0 && c.writer) {
    const double value = loss.item();
    progress_.update(step, value, tokens_per_second_ / c.block_size);
    if (board_)
      log_step(*board_, step, value, lr, "throughput(tps)", tokens_per_second_,
               progress_.mfu(tokens_per_second_ / c.block_size), c.device);
  }
  if (step % c.eval_every != 0 && step != c.steps) return;
  val_loss_ = estimate_loss(model_, logits_, validation_, c.batch, c.eval_batches, c.device);
  const double train_loss = estimate_loss(model_, logits_, train_, c.batch, c.eval_batches, c.device);
  if (!c.writer) return;
  progress_.finish_line();
  std::printf("step %lld  train loss %.4f  val loss %.4f  %.0f tokens/s\n", static_cast<long long>(step), train_loss,
              val_loss_, tokens_per_second_);
  csv_.append({static_cast<double>(step), train_loss, val_loss_, tokens_per_second_});
  if (board_) {
    board_->add_scalar("loss_metrics/estimated_train_loss", train_loss, step);
    board_->add_scalar("validation_metrics/loss", val_loss_, step);
    board_->flush();
  }
}

void TextRun::finish(const std::string& name, const data::CharVocab& vocab, const Sampler& sample, int64_t chars) {
  const TextTrainingConfig& c = config_;
  const double seconds = watch_.seconds();
  model_.eval();
  Tensor prompt = full({1, 1}, static_cast<double>(vocab.encode("\n")[0]), {.dtype = kInt64, .device = c.device});
  Generator sampler(c.seed + 2);
  const Tensor text = sample(prompt, chars, 0.8, &sampler);  // every rank: a tensor-parallel sample is collective
  if (!c.writer) return;
  std::printf("---- sample ----%s\n----------------\n", vocab.decode(text).c_str());
  print_result({{"example", name},
                {"steps", c.steps},
                {"val_loss", val_loss_},
                {"tokens_per_s", tokens_per_second_},
                {"seconds", seconds},
                {"device", c.device.str()}});
}

}  // namespace loom::examples
