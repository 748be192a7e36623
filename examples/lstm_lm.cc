// lstm_lm: a character-level LSTM language model on Debian's fortunes text:
// embedding, a multi-layer LSTM, a linear head. Reports the validation loss
// and ends with a generated sample.
//
//   bazel run //examples:lstm_lm -- --steps 1000 --hidden 256
#include <cstdio>

#include "data/char_corpus.h"
#include "examples/common/flags.h"
#include "examples/common/program.h"
#include "examples/common/run_files.h"
#include "examples/common/text_training.h"
#include "examples/models/models.h"
#include "optim/optimizer.h"

using namespace loom;

int train(int argc, char** argv) {
  using examples::integer_in, examples::number_in, examples::Scope;
  examples::Flags flags("Train a character-level LSTM language model on the fortunes text");
  models::CharLSTMOptions options{.vocab_size = 0, .embedding_dim = 48, .hidden_size = 192, .num_layers = 2};
  int64_t steps = 800, batch = 32, seq = 64, eval_every = 200, eval_batches = 10, sample_chars = 300;
  double lr = 3e-3;
  uint64_t seed = 0;
  std::string device_name = "cpu", metrics = "lstm_lm.csv", fortunes_dir = data::kFortunesDir;
  std::string tensorboard;
  flags.add("--steps", steps, "optimizer steps", Scope::Run, integer_in<int64_t>(1, 1e9));
  flags.add("--batch-size", batch, "sequences per step", Scope::Run, integer_in<int64_t>(1, 1 << 20));
  flags.add("--seq-len", seq, "characters per sequence (truncated backpropagation)", Scope::Run,
            integer_in<int64_t>(1, 1 << 20));
  flags.add("--embedding", options.embedding_dim, "embedding width", Scope::Run, integer_in<int64_t>(1, 1 << 16));
  flags.add("--hidden", options.hidden_size, "LSTM hidden size", Scope::Run, integer_in<int64_t>(1, 1 << 16));
  flags.add("--layers", options.num_layers, "LSTM layers", Scope::Run, integer_in<int64_t>(1, 1024));
  flags.add("--lr", lr, "Adam learning rate", Scope::Run, number_in(0, 1e6));
  flags.add("--device", device_name, "cpu or cuda[:N]", Scope::Rank, examples::device_name());
  flags.add("--eval-every", eval_every, "steps between validation estimates", Scope::Run,
            integer_in<int64_t>(1, 1e9));
  flags.add("--sample", sample_chars, "characters to generate at the end", Scope::Run, integer_in<int64_t>(0, 1e7));
  flags.add("--metrics", metrics, "metrics CSV", Scope::Rank);
  flags.add("--tensorboard", tensorboard, "folder for TensorBoard event files (docs/examples.md)", Scope::Rank);
  flags.add("--seed", seed, "random seed", Scope::Run);
  flags.add("--fortunes", fortunes_dir, "folder of fortune files (the text)", Scope::Rank);
  flags.parse(argc, argv);
  examples::RunFiles files;  // the metrics may not land among the text files it reads
  files.reads_folder("--fortunes", fortunes_dir);
  files.writes("--metrics", metrics);
  if (!tensorboard.empty()) files.writes("--tensorboard", tensorboard);
  files.check();

  const Device device = Device::parse(device_name);
  manual_seed(seed);
  data::CharCorpus corpus = data::CharCorpus::fortunes(fortunes_dir);
  data::CharDataset train(corpus.train, seq), validation(corpus.validation, seq);
  options.vocab_size = corpus.vocab.size();
  models::CharLSTM model(options);
  model->to(device);
  examples::check_text_step_memory(*model, [&](const Tensor& x) { return model->forward(x); }, batch, 1, seq,
                                   2, device, "a smaller --hidden or --layers");  // Adam: two moments
  optim::Adam opt(model->parameters(), {.lr = lr});
  std::printf("vocabulary %lld, %lld parameters, on %s\n", static_cast<long long>(options.vocab_size),
              static_cast<long long>(model->num_parameters()), device.str().c_str());

  const examples::TextTrainingConfig training{.steps = steps, .batch = batch, .block_size = seq,
                                              .eval_every = eval_every, .eval_batches = eval_batches, .seed = seed,
                                              .metrics = metrics, .tensorboard = tensorboard, .device = device};
  examples::TextRun run(training, *model, train, validation);
  for (int64_t step = 1; step <= steps; ++step) {
    auto [x, y] = run.next_batch();
    Tensor loss = examples::next_token_loss(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    optim::clip_grad_norm_(model->parameters(), 1.0);  // LSTMs need it: gradients can explode
    opt.step();
    run.step_done(step, loss, opt.lr());
  }
  run.finish("lstm_lm", corpus.vocab,
             [&](const Tensor& idx, int64_t n, double t, Generator* g) { return model->generate(idx, n, t, g); },
             sample_chars);
  return 0;
}

int main(int argc, char** argv) {
  return examples::run_program("lstm_lm", [&] { return train(argc, argv); });
}
