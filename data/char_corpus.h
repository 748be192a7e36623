// CharCorpus: a text turned into token ids for a character-level model, with
// its vocabulary and a train / validation split.
//
// The vocabulary is built from the whole text (so validation text encodes
// too); the validation part is the last `validation_fraction` of the tokens,
// a contiguous tail, so no window of the training set overlaps it.
//
//   CharCorpus corpus = CharCorpus::fortunes();       // Debian's fortunes
//   CharDataset train(corpus.train, 128), val(corpus.validation, 128);
//   corpus.vocab.decode(val.get(0).input);            // back to text
#pragma once

#include <string>

#include "data/char_vocab.h"
#include "data/fortunes.h"
#include "tensor/tensor.h"

namespace loom::data {

struct CharCorpus {
  CharVocab vocab;
  Tensor train;       // int64 (L_train): the first part of the text
  Tensor validation;  // int64 (L_val): the rest, floor(L * validation_fraction) tokens

  static CharCorpus from_text(const std::string& text, double validation_fraction = 0.1);
  // read_fortunes(dir), split as above.
  static CharCorpus fortunes(const std::string& dir = kFortunesDir,
                             double validation_fraction = 0.1);
};

}  // namespace loom::data
