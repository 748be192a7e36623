#include "data/char_corpus.h"

#include "tensor/ops.h"

namespace loom::data {

CharCorpus CharCorpus::from_text(const std::string& text, double validation_fraction) {
  LOOM_CHECK(!text.empty(), "CharCorpus: the text is empty");
  LOOM_CHECK(validation_fraction >= 0 && validation_fraction < 1,
             "CharCorpus: validation_fraction must be in [0, 1), got ", validation_fraction);
  CharCorpus corpus;
  corpus.vocab = CharVocab::from_text(text);
  Tensor tokens = from_vector(corpus.vocab.encode(text));
  const auto total = static_cast<int64_t>(text.size());
  const auto n_val = static_cast<int64_t>(static_cast<double>(total) * validation_fraction);
  corpus.train = tokens.narrow(0, 0, total - n_val);
  corpus.validation = tokens.narrow(0, total - n_val, n_val);
  return corpus;
}

CharCorpus CharCorpus::fortunes(const std::string& dir, double validation_fraction) {
  return from_text(read_fortunes(dir), validation_fraction);
}

}  // namespace loom::data
