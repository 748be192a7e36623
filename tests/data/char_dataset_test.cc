// CharDataset windows and CharCorpus splits, on small texts.
#include "data/char_dataset.h"

#include <gtest/gtest.h>

#include "data/char_corpus.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

TEST(CharDataset, TargetsAreInputsShiftedByOne) {
  CharDataset ds(arange(10, 20, 1, {.dtype = kInt64}), 4);  // tokens 10..19
  EXPECT_EQ(ds.size(), 6);  // windows start at 0..5; the last one's target ends at token 9
  Example e = ds.get(5);
  EXPECT_EQ(e.input.to_vector<int64_t>(), (std::vector<int64_t>{15, 16, 17, 18}));
  EXPECT_EQ(e.target.to_vector<int64_t>(), (std::vector<int64_t>{16, 17, 18, 19}));
  EXPECT_THROW_MSG(ds.get(6), "CharDataset: index 6 is out of range for 6 examples");
}

TEST(CharDataset, GetBatchMatchesStackedExamples) {
  Generator gen(3);
  Tensor tokens = randint(0, 50, {40}, {.dtype = kInt64}, &gen);
  CharDataset ds(tokens, 8);
  const std::vector<int64_t> picks = {31, 0, 17, 17};
  Batch b = ds.get_batch(picks);
  EXPECT_EQ(b.input.shape(), (Shape{4, 8}));
  EXPECT_EQ(b.target.shape(), (Shape{4, 8}));
  EXPECT_EQ(b.input.dtype(), kInt64);
  Batch reference = ds.Dataset::get_batch(picks);  // stacks get(i)
  EXPECT_EQ(b.input.to_vector<int64_t>(), reference.input.to_vector<int64_t>());
  EXPECT_EQ(b.target.to_vector<int64_t>(), reference.target.to_vector<int64_t>());
  // And against the token list itself.
  std::vector<int64_t> t = tokens.to_vector<int64_t>(), in = b.input.to_vector<int64_t>(),
                       out = b.target.to_vector<int64_t>();
  for (size_t r = 0; r < picks.size(); ++r)
    for (int64_t j = 0; j < 8; ++j) {
      EXPECT_EQ(in[r * 8 + j], t[picks[r] + j]);
      EXPECT_EQ(out[r * 8 + j], t[picks[r] + j + 1]);
    }
  EXPECT_THROW_MSG(ds.get_batch({0, 32}), "CharDataset: index 32 is out of range for 32 examples");
}

TEST(CharDataset, BadArguments) {
  EXPECT_THROW_MSG(CharDataset(arange(0, 4, 1, {.dtype = kInt64}), 4),
                   "CharDataset: 4 tokens are too few for block_size 4");
  EXPECT_THROW_MSG(CharDataset(arange(0, 4, 1, {.dtype = kInt64}), 0),
                   "block_size must be at least 1, got 0");
  EXPECT_THROW_MSG(CharDataset(zeros({10}), 2),
                   "CharDataset: expected a 1-D int64 CPU tensor of tokens, got float32");
  EXPECT_THROW_MSG(CharDataset(zeros({2, 5}, {.dtype = kInt64}), 2), "got int64 of shape [2, 5]");
}

TEST(CharCorpus, SplitsTheTailForValidation) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 7);  // "abcdefgabc..."
  CharCorpus corpus = CharCorpus::from_text(text, 0.1);
  EXPECT_EQ(corpus.vocab.chars(), "abcdefg");
  EXPECT_EQ(corpus.train.numel(), 90);
  EXPECT_EQ(corpus.validation.numel(), 10);
  EXPECT_EQ(corpus.train.dtype(), kInt64);
  EXPECT_EQ(corpus.vocab.decode(corpus.train), text.substr(0, 90));
  EXPECT_EQ(corpus.vocab.decode(corpus.validation), text.substr(90));
  // 95 characters and 0.25: 23 for validation (rounded down), 72 for training.
  CharCorpus other = CharCorpus::from_text(text.substr(0, 95), 0.25);
  EXPECT_EQ(other.validation.numel(), 23);
  EXPECT_EQ(other.train.numel(), 72);
  // The vocabulary covers the validation text even where training lacks a character.
  CharCorpus tail = CharCorpus::from_text("aaaaaaaaaz", 0.1);
  EXPECT_EQ(tail.vocab.chars(), "az");
  EXPECT_EQ(tail.vocab.decode(tail.validation), "z");
}

TEST(CharCorpus, BadArguments) {
  EXPECT_THROW_MSG(CharCorpus::from_text("", 0.1), "CharCorpus: the text is empty");
  EXPECT_THROW_MSG(CharCorpus::from_text("abc", 1.0),
                   "CharCorpus: validation_fraction must be in [0, 1), got 1");
}

}  // namespace
}  // namespace loom::data
