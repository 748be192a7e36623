// Shared by the character-level examples (char_gpt, lstm_lm): random
// (context, next tokens) windows of a corpus, as nanoGPT samples them, and
// the loss of next-token prediction.
#pragma once

#include <functional>

#include "data/char_dataset.h"
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

}  // namespace loom::examples
