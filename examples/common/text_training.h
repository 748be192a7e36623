// Shared by the character-level examples (char_gpt, lstm_lm): random
// (context, next tokens) windows of a corpus, as nanoGPT samples them, the
// loss of next-token prediction, and the nouns of a run (TextRun). Each
// example writes its own training loop.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "data/char_dataset.h"
#include "data/char_vocab.h"
#include "examples/common/progress.h"
#include "nn/module.h"
#include "tensor/flop_counter.h"
#include "tensor/stopwatch.h"
#include "tensorboard/summary_writer.h"

namespace loom::examples {

// logits (B, T, V) for token ids (B, T).
using LanguageModel = std::function<Tensor(const Tensor& idx)>;

// `batch` windows at random offsets: input (B, T) and targets (B, T) int64, on `device`.
data::Batch random_windows(const data::CharDataset& dataset, int64_t batch, Generator& generator, Device device);

// Mean cross-entropy of next-token prediction over (B, T).
Tensor next_token_loss(const Tensor& logits, const Tensor& targets);

// The pre-flight memory check of a training step at --batch-size `batch`
// (tensor/memory_budget.h): a step of `model` measured at two small
// batches of `block_size` tokens (its gradients set back and the random
// generator restored afterwards, so the run trains as it would have), scaled
// to this process's `batch / shards` sequences, plus `states_per_parameter`
// optimizer tensors per parameter and a loss estimate's forward of the whole
// batch, for each process on this machine.
// `otherwise` names the flags that make the model smaller.
void check_text_step_memory(nn::Module& model, const LanguageModel& forward, int64_t batch, int64_t shards,
                            int64_t block_size, int64_t states_per_parameter, Device device,
                            const std::string& otherwise);

// The mean loss over `batches` batches of random windows drawn with a fixed
// seed, so that successive estimates compare (no gradients, eval mode).
double estimate_loss(nn::Module& model, const LanguageModel& forward, const data::CharDataset& dataset,
                     int64_t batch, int64_t batches, Device device);

struct TextTrainingConfig {
  int64_t steps = 0, batch = 0, block_size = 0;
  int64_t eval_every = 0, eval_batches = 0;  // how often, and on how many batches, losses are estimated
  uint64_t seed = 0;                         // batches are drawn with seed + 1
  std::string metrics;                       // CSV path: step, train_loss, val_loss, tokens_per_s
  std::string tensorboard;                   // folder for TensorBoard event files; empty: none
  Device device;
  bool writer = true;  // prints and writes the metrics (rank 0 of a tensor-parallel job; the others only compute)
};

// Extends token ids (1, T) by `count` tokens at `temperature`, drawing from `generator`.
using Sampler = std::function<Tensor(const Tensor& idx, int64_t count, double temperature, Generator* generator)>;

// The nouns of a character model's training run, so that each example
// writes its own loop:
//
//   TextRun run(config, *model, train, validation);   // checks --metrics before any work
//   for (int64_t step = 1; step <= config.steps; ++step) {
//     auto [x, y] = run.next_batch();                  // random windows, as nanoGPT draws them
//     Tensor loss = next_token_loss(model->forward(x), y);
//     opt.zero_grad();
//     loss.backward();
//     opt.step();
//     run.step_done(step, loss, opt.lr());             // progress; every eval_every steps the estimates
//   }
//   run.finish("char_gpt", vocab, sample, 400);         // a generated sample, then RESULT
class TextRun {
 public:
  // `logits`: the whole vocabulary's logits for the loss estimates (default:
  // model.forward; a tensor-parallel model gathers them).
  TextRun(TextTrainingConfig config, nn::Module& model, const data::CharDataset& train,
          const data::CharDataset& validation, LanguageModel logits = nullptr);

  data::Batch next_batch();
  // After step `step` (1-based): the progress line, and every eval_every
  // steps (and at the last) the estimated train and validation losses,
  // printed and added to the metrics CSV. `lr`, the step's learning rate,
  // goes to TensorBoard with the loss.
  void step_done(int64_t step, const Tensor& loss, double lr);
  // `chars` characters sampled after a newline (temperature 0.8, seed + 2),
  // then the RESULT line of example `name`.
  void finish(const std::string& name, const data::CharVocab& vocab, const Sampler& sample, int64_t chars);

 private:
  TextTrainingConfig config_;
  nn::Module& model_;
  LanguageModel logits_;
  const data::CharDataset& train_;
  const data::CharDataset& validation_;
  MetricsCsv csv_;
  std::unique_ptr<tensorboard::SummaryWriter> board_;  // --tensorboard, on the writer
  Progress progress_;
  Generator batches_;
  Stopwatch watch_;
  double val_loss_ = 0, tokens_per_second_ = 0;
  // The first step's FLOPs on the writer, counted as it runs, for the
  // progress line's FLOP/s and MFU (parallel/planner/mfu.h).
  FlopCounter step_flops_;
  std::unique_ptr<FlopCounter::Scope> counting_;
  double peak_flops_ = 0;
};

}  // namespace loom::examples
