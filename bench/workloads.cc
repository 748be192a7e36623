#include "bench/workloads.h"

#include "examples/models/models.h"
#include "nn/nn.h"

namespace loom::bench {
namespace {

Tensor classification_loss(const Tensor& logits, const Tensor& labels) {
  return nn::functional::cross_entropy(logits, labels);
}

// The Fashion-MNIST CNN's training FLOPs: a layer of m multiply-adds costs
// 2m forward, 2m for its weight gradient and 2m for its input gradient,
// except the first convolution, whose input (the images) needs none.
double fashion_cnn_flops(int64_t batch) {
  const double conv1 = 2.0 * batch * 32 * 28 * 28 * (1 * 3 * 3);  // 1 -> 32 channels, 28x28
  const double conv2 = 2.0 * batch * 64 * 14 * 14 * (32 * 3 * 3);  // 32 -> 64 channels, 14x14
  const double fc1 = 2.0 * batch * (64 * 7 * 7) * 128;
  const double fc2 = 2.0 * batch * 128 * 10;
  return 2 * conv1 + 3 * (conv2 + fc1 + fc2);
}

// A GPT's training FLOPs as nanoGPT and PaLM count them: 6 per parameter of
// a product and token (forward, both gradients), plus 12 L T d per token
// for the attention's two products (counted whole, as if not causal).
// The products' parameters: 12 d^2 a block and the head's d x vocab.
double gpt_flops(const models::GPTConfig& c, int64_t batch) {
  const double d = static_cast<double>(c.n_embd), layers = static_cast<double>(c.n_layer);
  const double product_params = layers * 12 * d * d + d * static_cast<double>(c.vocab_size);
  const double tokens = static_cast<double>(batch * c.block_size);
  return tokens * (6 * product_params + 12 * layers * static_cast<double>(c.block_size) * d);
}

// An LSTM's: each step and layer multiplies [x, h] by a (4H, I + H) matrix;
// the classifier reads the last step. Times 3 for training.
double lstm_flops(int64_t batch, int64_t steps, int64_t input, int64_t hidden, int layers, int64_t classes) {
  double forward = 0;
  for (int l = 0; l < layers; ++l)
    forward += 2.0 * batch * steps * 4 * hidden * ((l == 0 ? input : hidden) + hidden);
  forward += 2.0 * batch * hidden * classes;
  return 3 * forward;
}

void set_gpt(Workload& w, const models::GPTConfig& c, int64_t batch, Device device) {
  w.flops_per_step = gpt_flops(c, batch);
  w.model = models::GPT(c);
  w.input = randint(0, c.vocab_size, {batch, c.block_size}, {.dtype = kInt64, .device = device});
  w.target = randint(0, c.vocab_size, {batch, c.block_size}, {.dtype = kInt64, .device = device});
  w.loss = [vocab = c.vocab_size](const Tensor& logits, const Tensor& targets) {
    return nn::functional::cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}));
  };
  w.tokens_per_step = batch * c.block_size;
}

}  // namespace

Workload make_workload(const std::string& name, Device device, MlpShape mlp, GptShape gpt) {
  const bool gpu = device.is_cuda();
  Workload w;
  w.name = name;
  w.loss = classification_loss;
  if (name == "cnn") {
    w.model = models::fashion_cnn();
    w.input = randn({256, 1, 28, 28}, {.device = device});
    w.target = randint(0, 10, {256}, {.dtype = kInt64, .device = device});
    w.flops_per_step = fashion_cnn_flops(256);
  } else if (name == "gpt") {
    models::GPTConfig c = gpu ? models::GPTConfig{65, 256, 6, 6, 384} : models::GPTConfig{65, 64, 2, 4, 128};
    LOOM_CHECK(gpt.context >= 0 && gpt.batch >= 0, "gpt: context and batch must not be negative");
    if (gpt.context > 0) c.block_size = gpt.context;
    set_gpt(w, c, gpt.batch > 0 ? gpt.batch : gpu ? 64 : 8, device);
  } else if (name == "gpt_large") {
    set_gpt(w, models::GPTConfig{65, 128, 4, 4, 256}, 16, device);
  } else if (name == "lstm") {
    const int64_t hidden = gpu ? 512 : 128;
    w.model = models::LSTMClassifier({.input_size = 64, .hidden_size = hidden, .num_layers = 2, .classes = 10});
    w.input = randn({64, 64, 64}, {.device = device});
    w.target = randint(0, 10, {64}, {.dtype = kInt64, .device = device});
    w.flops_per_step = lstm_flops(64, 64, 64, hidden, 2, 10);
  } else if (name == "mlp") {
    LOOM_CHECK(mlp.layers >= 2 && mlp.hidden > 0 && mlp.batch > 0,
               "mlp: needs at least 2 layers, a positive width and a positive batch");
    nn::Sequential net(nn::Linear(512, mlp.hidden), nn::ReLU());
    for (int k = 0; k < mlp.layers - 2; ++k) {
      net->push_back(nn::Linear(mlp.hidden, mlp.hidden));
      net->push_back(nn::ReLU());
    }
    net->push_back(nn::Linear(mlp.hidden, 10));
    w.model = net;
    w.input = randn({mlp.batch, 512}, {.device = device});
    w.target = randint(0, 10, {mlp.batch}, {.dtype = kInt64, .device = device});
  } else {
    LOOM_FAIL("unknown workload '", name, "' (expected cnn, gpt, gpt_large, lstm or mlp)");
  }
  w.model->to(device);
  w.samples_per_step = w.input.size(0);
  return w;
}

}  // namespace loom::bench
