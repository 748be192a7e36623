#include "examples/models/models.h"

#include <cmath>

namespace loom::models {

nn::Sequential fashion_cnn(int64_t width) {
  LOOM_CHECK(width > 0, "fashion_cnn: width must be positive, got ", width);
  return nn::Sequential(nn::Conv2d({.in_channels = 1, .out_channels = width, .kernel_size = 3, .padding = 1}),
                        nn::ReLU(), nn::MaxPool2d(2),
                        nn::Conv2d({.in_channels = width, .out_channels = 2 * width, .kernel_size = 3, .padding = 1}),
                        nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::Linear(2 * width * 7 * 7, 4 * width),
                        nn::ReLU(), nn::Linear(4 * width, 10));
}

int64_t fashion_cnn_num_parameters(int64_t w) {
  const int64_t conv1 = w * 9 + w, conv2 = 2 * w * w * 9 + 2 * w;  // weights and biases
  const int64_t fc1 = 2 * w * 7 * 7 * 4 * w + 4 * w, fc2 = 4 * w * 10 + 10;
  return conv1 + conv2 + fc1 + fc2;
}

BlockImpl::BlockImpl(const GPTConfig& c) : Cloneable("Block"), config(c) { reset(); }

void BlockImpl::reset() {
  const int64_t d = config.n_embd;
  ln1 = register_module("ln1", nn::LayerNorm(d));
  attn = register_module("attn", nn::CausalSelfAttention({.embed_dim = d, .num_heads = config.n_head, .dropout = config.dropout}));
  ln2 = register_module("ln2", nn::LayerNorm(d));
  fc = register_module("fc", nn::Linear(d, 4 * d));
  proj = register_module("proj", nn::Linear(4 * d, d));
  dropout = register_module("dropout", nn::Dropout(config.dropout));
}

Tensor BlockImpl::forward(const Tensor& x) {
  Tensor h = x + attn->forward(ln1->forward(x));
  return h + dropout->forward(proj->forward(gelu(fc->forward(ln2->forward(h)), GeluApproximation::Tanh)));
}

GPTImpl::GPTImpl(const GPTConfig& c) : Cloneable("GPT"), config(c) {
  LOOM_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer > 0 && c.n_embd % c.n_head == 0,
             "GPT: invalid config (vocab ", c.vocab_size, ", block ", c.block_size, ", layers ", c.n_layer, ", heads ",
             c.n_head, ", embd ", c.n_embd, ")");
  reset();
}

void GPTImpl::reset() {
  wte = register_module("wte", nn::Embedding(config.vocab_size, config.n_embd));
  wpe = register_module("wpe", nn::Embedding(config.block_size, config.n_embd));
  dropout = register_module("dropout", nn::Dropout(config.dropout));
  blocks = register_module("blocks", nn::ModuleList());
  for (int64_t l = 0; l < config.n_layer; ++l) blocks->push_back(Block(config));
  ln_f = register_module("ln_f", nn::LayerNorm(config.n_embd));
  head = register_module("head", nn::Linear(config.n_embd, config.vocab_size, /*bias=*/false));
  // nanoGPT's initialisation.
  for (auto& [name, p] : named_parameters()) {
    if (p.dim() == 2) {
      const bool residual = name.size() >= 11 && name.compare(name.size() - 11, 11, "proj.weight") == 0;
      nn::init::normal_(p, 0, residual ? 0.02 / std::sqrt(2.0 * config.n_layer) : 0.02);
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      nn::init::zeros_(p);
    }
  }
}

Tensor GPTImpl::forward(const Tensor& idx) {
  LOOM_CHECK(idx.dim() == 2 && idx.size(1) <= config.block_size, "GPT: expected token ids (B, T) with T <= ",
             config.block_size, ", got shape ", idx.shape());
  Tensor positions = arange(idx.size(1), {.dtype = kInt64, .device = idx.device()});
  Tensor x = dropout->forward(wte->forward(idx) + wpe->forward(positions));
  for (size_t l = 0; l < blocks->size(); ++l) x = (*blocks)[l]->forward(x);
  return head->forward(ln_f->forward(x));
}

int64_t sample_token(const Tensor& logits, double temperature, Generator& generator) {
  std::vector<double> p = softmax(logits / temperature, -1).to_vector<double>();
  // Inverse-CDF sampling on the host: one draw per token.
  double u = generator.next_double(), cumulative = 0;
  for (size_t k = 0; k < p.size(); ++k)
    if ((cumulative += p[k]) > u) return static_cast<int64_t>(k);
  return static_cast<int64_t>(p.size()) - 1;
}

Tensor generate_with(const WindowLogits& logits, Tensor idx, int64_t count, int64_t block_size, double temperature,
                     Generator& generator, int64_t multiple, int64_t drawn) {
  NoGradGuard no_grad;
  LOOM_CHECK(multiple >= 1 && block_size % multiple == 0, "generate: windows of up to ", block_size,
             " tokens cannot be padded to a multiple of ", multiple);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = idx.size(1), start = std::max<int64_t>(0, t - block_size), length = t - start;
    Tensor window = idx.narrow(1, start, length);
    if (length % multiple != 0)
      window = cat({window, zeros({1, multiple - length % multiple}, {.dtype = kInt64, .device = idx.device()})}, 1);
    Tensor last = logits(window).select(0, 0).select(0, length - 1);  // (V)
    if (drawn > 0) last = last.narrow(0, 0, drawn);
    const int64_t next = sample_token(last, temperature, generator);
    idx = cat({idx, full({1, 1}, static_cast<double>(next), {.dtype = kInt64, .device = idx.device()})}, 1);
  }
  return idx;
}

Tensor GPTImpl::generate(Tensor idx, int64_t count, double temperature, Generator* generator) {
  return generate_with([this](const Tensor& window) { return forward(window); }, std::move(idx), count,
                       config.block_size, temperature, generator ? *generator : default_generator());
}

CharLSTMImpl::CharLSTMImpl(const CharLSTMOptions& o) : Cloneable("CharLSTM"), options(o) {
  LOOM_CHECK(o.vocab_size > 0, "CharLSTM: vocab_size must be positive");
  reset();
}

void CharLSTMImpl::reset() {
  embedding = register_module("embedding", nn::Embedding(options.vocab_size, options.embedding_dim));
  lstm = register_module("lstm", nn::LSTM({.input_size = options.embedding_dim, .hidden_size = options.hidden_size,
                                           .num_layers = options.num_layers, .batch_first = true}));
  head = register_module("head", nn::Linear(options.hidden_size, options.vocab_size));
}

Tensor CharLSTMImpl::forward(const Tensor& idx) {
  return head->forward(lstm->forward(embedding->forward(idx), nn::LSTMState{}).output);
}

Tensor CharLSTMImpl::generate(Tensor idx, int64_t count, double temperature, Generator* generator) {
  NoGradGuard no_grad;
  Generator& gen = generator ? *generator : default_generator();
  // Read the prompt once, then feed one token at a time with the carried state.
  nn::LSTMOutput out = lstm->forward(embedding->forward(idx), nn::LSTMState{});
  Tensor last = out.output.select(1, -1);  // (1, H)
  for (int64_t i = 0; i < count; ++i) {
    const int64_t next = sample_token(head->forward(last).select(0, 0), temperature, gen);
    Tensor token = full({1, 1}, static_cast<double>(next), {.dtype = kInt64, .device = idx.device()});
    idx = cat({idx, token}, 1);
    out = lstm->forward(embedding->forward(token), out.state);
    last = out.output.select(1, -1);
  }
  return idx;
}

LSTMClassifierImpl::LSTMClassifierImpl(const LSTMClassifierOptions& o) : Cloneable("LSTMClassifier"), options(o) {
  reset();
}

void LSTMClassifierImpl::reset() {
  lstm = register_module("lstm", nn::LSTM({.input_size = options.input_size, .hidden_size = options.hidden_size,
                                           .num_layers = options.num_layers, .batch_first = true}));
  head = register_module("head", nn::Linear(options.hidden_size, options.classes));
}

Tensor LSTMClassifierImpl::forward(const Tensor& x) {
  Tensor out = lstm->forward(x, nn::LSTMState{}).output;  // (B, T, H)
  return head->forward(out.select(1, -1));
}

}  // namespace loom::models
