// CharDataset: next-token prediction examples over a sequence of tokens, for
// character-level language models (Karpathy's char-rnn / nanoGPT setup).
//
// Example i is a window of block_size tokens starting at position i, and as
// target the same window shifted by one: the token that follows each input
// position. A sequence of L tokens gives L - block_size examples.
//
//   CharCorpus corpus = CharCorpus::from_text(text);          // data/char_corpus.h
//   CharDataset train(corpus.train, /*block_size=*/64);
//   Example e = train.get(0);   // input: tokens[0, 64), target: tokens[1, 65), int64
//   Batch b = train.get_batch({0, 100});                      // input and target (2, 64)
#pragma once

#include "data/dataset.h"

namespace loom::data {

class CharDataset : public Dataset {
 public:
  // tokens: 1-D int64 on the CPU, longer than block_size.
  CharDataset(const Tensor& tokens, int64_t block_size);

  int64_t size() const override { return tokens_.numel() - block_size_; }
  Example get(int64_t index) const override;  // views into the token sequence
  // Two gathers (inputs, targets) of batch * block_size tokens.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  int64_t block_size() const { return block_size_; }
  const Tensor& tokens() const { return tokens_; }

 private:
  Tensor tokens_;
  int64_t block_size_;
};

}  // namespace loom::data
