#include "examples/common/text_training.h"

#include <chrono>
#include <cstdio>

#include "examples/common/progress.h"
#include "examples/common/result.h"
#include "nn/functional.h"
#include "tensor/file_io.h"
#include "tensor/stopwatch.h"

namespace loom::examples {

data::Batch random_windows(const data::CharDataset& dataset, int64_t batch, Generator& generator, Device device) {
  std::vector<int64_t> offsets(batch);
  for (int64_t& o : offsets) o = static_cast<int64_t>(generator.next_u64() % static_cast<uint64_t>(dataset.size()));
  data::Batch b = dataset.get_batch(offsets);
  return {b.input.to(device), b.target.to(device)};
}

Tensor next_token_loss(const Tensor& logits, const Tensor& targets) {
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

double estimate_loss(nn::Module& model, const LanguageModel& forward, const data::CharDataset& dataset,
                     int64_t batch, int64_t batches, Device device) {
  NoGradGuard no_grad;
  model.eval();
  Generator fixed(1234);
  double total = 0;
  for (int64_t i = 0; i < batches; ++i) {
    data::Batch b = random_windows(dataset, batch, fixed, device);
    total += next_token_loss(forward(b.input), b.target).item();
  }
  model.train();
  return total / batches;
}

TextTrainingResult train_language_model(nn::Module& model, const data::CharDataset& train,
                                        const data::CharDataset& validation, const TextTrainingConfig& c,
                                        const std::function<void(const Tensor& loss)>& update) {
  if (!c.metrics.empty()) AtomicFile::check_writable(c.metrics, "--metrics");  // before hours of training
  auto forward = [&](const Tensor& idx) { return model.forward(idx); };
  MetricsCsv csv(c.metrics, {"step", "train_loss", "val_loss", "tokens_per_s"});
  Progress progress(c.steps, 50);
  Generator batches(c.seed + 1);
  TextTrainingResult result;
  const auto start = std::chrono::steady_clock::now();
  auto seconds_so_far = [&] { return seconds_since(start); };
  for (int64_t step = 1; step <= c.steps; ++step) {
    data::Batch b = random_windows(train, c.batch, batches, c.device);
    Tensor loss = next_token_loss(model.forward(b.input), b.target);
    update(loss);
    result.tokens_per_second = step * c.batch * c.block_size / seconds_so_far();
    // Reading the loss synchronises a GPU: only when a line is printed.
    if (step % 50 == 0) progress.update(step, loss.item(), result.tokens_per_second / c.block_size);
    if (step % c.eval_every == 0 || step == c.steps) {
      result.val_loss = estimate_loss(model, forward, validation, c.batch, c.eval_batches, c.device);
      const double train_loss = estimate_loss(model, forward, train, c.batch, c.eval_batches, c.device);
      progress.finish_line();
      std::printf("step %lld  train loss %.4f  val loss %.4f  %.0f tokens/s\n", static_cast<long long>(step),
                  train_loss, result.val_loss, result.tokens_per_second);
      csv.append({static_cast<double>(step), train_loss, result.val_loss, result.tokens_per_second});
    }
  }
  result.seconds = seconds_so_far();
  return result;
}

void report_language_model(const std::string& name, const data::CharVocab& vocab, const Sampler& sample, int64_t chars,
                           const TextTrainingConfig& c, const TextTrainingResult& result) {
  Tensor prompt = full({1, 1}, static_cast<double>(vocab.encode("\n")[0]), {.dtype = kInt64, .device = c.device});
  Generator sampler(c.seed + 2);
  std::printf("---- sample ----%s\n----------------\n", vocab.decode(sample(prompt, chars, 0.8, &sampler)).c_str());
  print_result({{"example", name},
                {"steps", c.steps},
                {"val_loss", result.val_loss},
                {"tokens_per_s", result.tokens_per_second},
                {"seconds", result.seconds},
                {"device", c.device.str()}});
}

}  // namespace loom::examples
