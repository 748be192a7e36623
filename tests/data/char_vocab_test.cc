// CharVocab: sorted distinct bytes, encode/decode round trips, and errors.
#include "data/char_vocab.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom::data {
namespace {

TEST(CharVocab, SortedDistinctCharacters) {
  CharVocab vocab = CharVocab::from_text("hello world");
  EXPECT_EQ(vocab.chars(), " dehlorw");
  EXPECT_EQ(vocab.size(), 8);
  EXPECT_EQ(vocab.encode("low"), (std::vector<int64_t>{4, 5, 7}));
  EXPECT_EQ(vocab.encode(""), std::vector<int64_t>{});
  EXPECT_EQ(vocab.decode(std::vector<int64_t>{3, 2, 4, 4, 5}), "hello");
  EXPECT_TRUE(vocab.contains('w'));
  EXPECT_FALSE(vocab.contains('x'));
}

TEST(CharVocab, RoundTripOfBytesIncludingUtf8AndControls) {
  // "naïve" in UTF-8 (ï is 0xc3 0xaf), a tab, a backspace and a NUL byte.
  const std::string text = std::string("na\xc3\xafve\tx\by") + '\0' + "z\n";
  CharVocab vocab = CharVocab::from_text(text);
  EXPECT_EQ(vocab.size(), 13);
  EXPECT_EQ(vocab.chars().front(), '\0');
  EXPECT_EQ(static_cast<uint8_t>(vocab.chars().back()), 0xc3);  // bytes sort as unsigned
  EXPECT_EQ(vocab.decode(vocab.encode(text)), text);
  // Token ids are the ranks: strictly increasing over chars().
  std::vector<int64_t> ids = vocab.encode(vocab.chars());
  for (int64_t i = 0; i < vocab.size(); ++i) EXPECT_EQ(ids[i], i);
}

TEST(CharVocab, DecodeATensor) {
  CharVocab vocab = CharVocab::from_text("abc");
  EXPECT_EQ(vocab.decode(from_vector<int64_t>({2, 1, 0, 2}, {2, 2})), "cbac");
  EXPECT_THROW_MSG(vocab.decode(zeros({2})),
                   "CharVocab::decode: expected an integer tensor of token ids, got float32");
}

TEST(CharVocab, Errors) {
  CharVocab vocab = CharVocab::from_text("abc");
  EXPECT_THROW_MSG(vocab.encode("abd"),
                   "CharVocab::encode: character 'd' at position 2 is not in the "
                   "vocabulary of 3 characters");
  EXPECT_THROW_MSG(vocab.encode("a\x01"), "character \\x01 at position 1");
  EXPECT_THROW_MSG(
      vocab.decode(std::vector<int64_t>{0, 3}),
      "CharVocab::decode: token 3 at position 1 is out of range for a vocabulary of 3 characters");
  EXPECT_THROW_MSG(vocab.decode(std::vector<int64_t>{-1}),
                   "token -1 at position 0 is out of range");
  EXPECT_EQ(CharVocab().size(), 0);
}

}  // namespace
}  // namespace loom::data
