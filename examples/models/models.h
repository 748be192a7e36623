// The models that loom's examples, benchmarks and comparison tool train.
// Their shapes are fixed by the benchmark definitions so that results compare
// across frameworks (bench/torch_reference.py builds the same ones).
//
//   nn::Sequential cnn = models::fashion_cnn();
//   models::GPT gpt(models::GPTConfig{.vocab_size = 65, .block_size = 64, .n_layer = 2, .n_head = 4, .n_embd = 128});
//   models::LSTMClassifier rnn({.input_size = 64, .hidden_size = 128, .num_layers = 2, .classes = 10});
#pragma once

#include <functional>

#include "nn/nn.h"

namespace loom::models {

// Conv(1,w,3,p1)-ReLU-MaxPool2-Conv(w,2w,3,p1)-ReLU-MaxPool2-Flatten-Linear(2w*7*7,4w)-ReLU-Linear(4w,10),
// for 1x28x28 images. The benchmark shape is width 32.
nn::Sequential fashion_cnn(int64_t width = 32);
// Its parameter count, 410 w^2 + 56 w + 10, without building it (a program
// checks that a --width fits in memory before allocating the weights).
int64_t fashion_cnn_num_parameters(int64_t width);

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 256;  // longest context
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  double dropout = 0;
};

// A pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)),
// with a GELU MLP of width 4 n_embd.
class BlockImpl : public nn::Cloneable<BlockImpl> {
 public:
  explicit BlockImpl(const GPTConfig& config);
  void reset() override;
  Tensor forward(const Tensor& x) override;

  GPTConfig config;
  nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  nn::CausalSelfAttention attn{nullptr};
  nn::Linear fc{nullptr}, proj{nullptr};
  nn::Dropout dropout{nullptr};
};
LOOM_MODULE(Block);

// A GPT-style character model: token and position embeddings, blocks, a
// final LayerNorm and a linear head. Initialised as nanoGPT does: N(0, 0.02)
// weights, zero biases, and residual projections scaled by 1/sqrt(2 n_layer).
class GPTImpl : public nn::Cloneable<GPTImpl> {
 public:
  using Options = GPTConfig;
  explicit GPTImpl(const GPTConfig& config);
  void reset() override;
  // idx (B, T) int64 token ids, T <= block_size -> logits (B, T, vocab_size).
  Tensor forward(const Tensor& idx) override;
  // Extends idx (1, T) by `count` tokens sampled at `temperature`.
  Tensor generate(Tensor idx, int64_t count, double temperature = 1.0, Generator* generator = nullptr);

  GPTConfig config;
  nn::Embedding wte{nullptr}, wpe{nullptr};
  nn::Dropout dropout{nullptr};
  nn::ModuleList blocks{nullptr};
  nn::LayerNorm ln_f{nullptr};
  nn::Linear head{nullptr};
};
LOOM_MODULE(GPT);

struct LSTMClassifierOptions {
  int64_t input_size = 64;
  int64_t hidden_size = 128;
  int64_t num_layers = 2;
  int64_t classes = 10;
};

// A batch-first LSTM whose last step's output feeds a linear classifier.
class LSTMClassifierImpl : public nn::Cloneable<LSTMClassifierImpl> {
 public:
  using Options = LSTMClassifierOptions;
  explicit LSTMClassifierImpl(const LSTMClassifierOptions& options);
  void reset() override;
  // x (B, T, input_size) -> logits (B, classes)
  Tensor forward(const Tensor& x) override;

  LSTMClassifierOptions options;
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
};
LOOM_MODULE(LSTMClassifier);

struct CharLSTMOptions {
  int64_t vocab_size = 0;
  int64_t embedding_dim = 64;
  int64_t hidden_size = 256;
  int64_t num_layers = 2;
};

// A character-level LSTM language model: embedding, LSTM, linear head.
class CharLSTMImpl : public nn::Cloneable<CharLSTMImpl> {
 public:
  using Options = CharLSTMOptions;
  explicit CharLSTMImpl(const CharLSTMOptions& options);
  void reset() override;
  // idx (B, T) -> logits (B, T, vocab)
  Tensor forward(const Tensor& idx) override;
  // Extends idx (1, T) by `count` tokens, carrying the LSTM state step to step.
  Tensor generate(Tensor idx, int64_t count, double temperature = 1.0, Generator* generator = nullptr);

  CharLSTMOptions options;
  nn::Embedding embedding{nullptr};
  nn::LSTM lstm{nullptr};
  nn::Linear head{nullptr};
};
LOOM_MODULE(CharLSTM);

// Draws a token from the softmax of `logits` (V) at `temperature`.
int64_t sample_token(const Tensor& logits, double temperature, Generator& generator);

// Extends idx (1, T) by `count` tokens, each drawn from the last of `logits`
// (a window (1, W) of at most `block_size` tokens -> (1, W, V)) at
// `temperature`. `multiple`: each window is padded at its end to a multiple
// of it, for a model whose ranks each take a share of the sequence (causal
// attention keeps the padding out of the last real token's logits).
// `drawn`: only the first `drawn` entries of V are drawn (0: all), for a
// vocabulary padded to a multiple of the ranks.
using WindowLogits = std::function<Tensor(const Tensor& window)>;
Tensor generate_with(const WindowLogits& logits, Tensor idx, int64_t count, int64_t block_size, double temperature,
                     Generator& generator, int64_t multiple = 1, int64_t drawn = 0);

}  // namespace loom::models
