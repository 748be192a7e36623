#include "data/char_vocab.h"

#include <cstdio>

#include "tensor/error.h"

namespace loom::data {
namespace {

// 'a' for printable characters, else \xNN: error messages stay one line.
std::string show(char c) {
  const auto b = static_cast<uint8_t>(c);
  if (b >= 32 && b < 127) return std::string("'") + c + "'";
  char text[8];
  std::snprintf(text, sizeof(text), "\\x%02x", b);
  return text;
}

}  // namespace

std::array<int16_t, 256> CharVocab::filled_with_minus_one() {
  std::array<int16_t, 256> table;
  table.fill(-1);
  return table;
}

CharVocab CharVocab::from_text(const std::string& text) {
  std::array<bool, 256> seen{};
  for (char c : text) seen[static_cast<uint8_t>(c)] = true;
  CharVocab vocab;
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    vocab.token_of_[b] = static_cast<int16_t>(vocab.chars_.size());
    vocab.chars_.push_back(static_cast<char>(b));
  }
  return vocab;
}

std::vector<int64_t> CharVocab::encode(const std::string& text) const {
  std::vector<int64_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int16_t token = token_of_[static_cast<uint8_t>(text[i])];
    LOOM_CHECK(token >= 0, "CharVocab::encode: character ", show(text[i]), " at position ", i,
               " is not in the vocabulary of ", size(), " characters");
    tokens[i] = token;
  }
  return tokens;
}

std::string CharVocab::decode(const std::vector<int64_t>& tokens) const {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] < size(), "CharVocab::decode: token ", tokens[i],
               " at position ", i, " is out of range for a vocabulary of ", size(), " characters");
    text[i] = chars_[static_cast<size_t>(tokens[i])];
  }
  return text;
}

std::string CharVocab::decode(const Tensor& tokens) const {
  LOOM_CHECK(is_integral(tokens.dtype()),
             "CharVocab::decode: expected an integer tensor of token ids, got ", tokens.dtype());
  return decode(tokens.to_vector<int64_t>());
}

}  // namespace loom::data
