// CharVocab: the vocabulary of a character-level language model, the sorted
// distinct characters of a corpus, each one's token id being its rank.
//
// Characters are bytes. Text in UTF-8 becomes one token per byte, so a
// multi-byte character is a few tokens, and decode(encode(s)) == s for any
// s made of the corpus's bytes.
//
//   CharVocab vocab = CharVocab::from_text("hello world");  // " dehlorw": 8 tokens
//   std::vector<int64_t> ids = vocab.encode("low");         // {4, 5, 7}
//   vocab.decode(ids);                                      // "low"
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace loom::data {

class CharVocab {
 public:
  CharVocab() = default;  // empty
  static CharVocab from_text(const std::string& text);

  int64_t size() const { return static_cast<int64_t>(chars_.size()); }
  // All characters, in token order (token i is chars()[i]).
  const std::string& chars() const { return chars_; }
  bool contains(char c) const { return token_of_[static_cast<uint8_t>(c)] >= 0; }

  // Throws, naming the character and its position, on one not in the vocabulary.
  std::vector<int64_t> encode(const std::string& text) const;
  // Throws on a token outside [0, size()).
  std::string decode(const std::vector<int64_t>& tokens) const;
  std::string decode(const Tensor& tokens) const;  // integer tensor, any shape, read in order

 private:
  std::string chars_;
  std::array<int16_t, 256> token_of_ = filled_with_minus_one();

  static std::array<int16_t, 256> filled_with_minus_one();
};

}  // namespace loom::data
