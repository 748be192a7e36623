// Shared by the character-level examples (char_gpt, lstm_lm): random
// (context, next tokens) windows of a corpus, as nanoGPT samples them, the
// loss of next-token prediction, and the training loop itself.
#pragma once

#include <functional>
#include <string>

#include "data/char_dataset.h"
#include "data/char_vocab.h"
#include "nn/module.h"

namespace loom::examples {

// logits (B, T, V) for token ids (B, T).
using LanguageModel = std::function<Tensor(const Tensor& idx)>;

// `batch` windows at random offsets: input (B, T) and targets (B, T) int64, on `device`.
data::Batch random_windows(const data::CharDataset& dataset, int64_t batch, Generator& generator, Device device);

// Mean cross-entropy of next-token prediction over (B, T).
Tensor next_token_loss(const Tensor& logits, const Tensor& targets);

// The mean loss over `batches` batches of random windows drawn with a fixed
// seed, so that successive estimates compare (no gradients, eval mode).
double estimate_loss(nn::Module& model, const LanguageModel& forward, const data::CharDataset& dataset,
                     int64_t batch, int64_t batches, Device device);

struct TextTrainingConfig {
  int64_t steps = 0, batch = 0, block_size = 0;
  int64_t eval_every = 0, eval_batches = 0;  // how often, and on how many batches, losses are estimated
  uint64_t seed = 0;                         // batches are drawn with seed + 1
  std::string metrics;                       // CSV path: step, train_loss, val_loss, tokens_per_s
  Device device;
};

struct TextTrainingResult {
  double val_loss = 0, tokens_per_second = 0, seconds = 0;
};

// Trains `model` (logits (B, T, V) from ids (B, T)) for config.steps steps of
// random windows of `train`. `update(loss)` is the example's optimisation
// step: zero the gradients, backward, clip, step its optimizers and
// schedules. Every eval_every steps (and at the end) prints and records the
// estimated train and validation losses.
TextTrainingResult train_language_model(nn::Module& model, const data::CharDataset& train,
                                        const data::CharDataset& validation, const TextTrainingConfig& config,
                                        const std::function<void(const Tensor& loss)>& update);

// Extends token ids (1, T) by `count` tokens at `temperature`, drawing from `generator`.
using Sampler = std::function<Tensor(const Tensor& idx, int64_t count, double temperature, Generator* generator)>;

// The end of a run: `chars` characters sampled after a newline (temperature
// 0.8, seed + 2), then the RESULT line of example `name`.
void report_language_model(const std::string& name, const data::CharVocab& vocab, const Sampler& sample, int64_t chars,
                           const TextTrainingConfig& config, const TextTrainingResult& result);

}  // namespace loom::examples
