// char_gpt: a GPT-style character model trained on Debian's fortunes text.
// Token and position embeddings, pre-LayerNorm blocks with causal attention
// and a GELU MLP, AdamW with weight decay on the weight matrices only (as
// nanoGPT). Reports the validation loss and ends with a generated sample.
//
//   bazel run //examples:char_gpt                               # small, for a CPU
//   bazel run //examples:char_gpt -- --preset shakespeare --device cuda
//     (nanoGPT's shakespeare-char shape: 6 layers, 6 heads, d=384, context 256, batch 64)
//   mpirun -np 2 bazel-bin/examples/char_gpt --tp 2
//     (tensor parallel, Megatron-style: each rank holds half of every block's heads and MLP,
//      and of the vocabulary, padded to a multiple of the ranks; all ranks see the same batches;
//      --sequence-parallel also splits the tokens between the layers)
//   mpirun -np 4 bazel-bin/examples/char_gpt --dp 2 --tp 2
//     (a 2 x 2 mesh: two data-parallel replicas, each in tensor parallel over two ranks,
//      each replica on half of every batch)
//   mpirun -np 2 bazel-bin/examples/char_gpt --cp 2
//     (context parallel: each rank runs the whole model on half of every sequence's tokens,
//      an early and a late chunk, and attention gathers the other rank's keys and values;
//      --cp-exchange ring passes them round the ranks instead: ring attention; --cp-exchange
//      all-to-all gives each rank half the heads over the whole sequence: Ulysses)
//   mpirun -np 4 bazel-bin/examples/char_gpt --cp 2 --tp 2
//     (both: tensor parallel over 2 ranks, each pair on half of every sequence)
#include <cstdio>

#include "data/char_corpus.h"
#include "examples/common/flags.h"
#include "examples/common/graphed_step.h"
#include "examples/common/program.h"
#include "examples/common/run_files.h"
#include "examples/common/text_training.h"
#include "examples/common/ranks.h"
#include "examples/models/gpt_plans.h"
#include "examples/models/models.h"
#include "optim/grad_scaler.h"
#include "parallel/sharding/sharded_grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/comm/init.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel/layers.h"
#include "tensor/autocast.h"

using namespace loom;

// How the model lies over the ranks, for the first line printed.
std::string layout_text(int dp, int tp, int cp, bool sequence_parallel, const std::string& exchange) {
  std::string text;
  if (tp > 1)
    text += " per rank, tensor parallel over " + std::to_string(tp) + " ranks" +
            (sequence_parallel ? " (sequence parallel)" : "");
  if (cp > 1)
    text += ", context parallel over " + std::to_string(cp) + " ranks" +
            (exchange == "ring" ? " (ring attention)" : exchange == "all-to-all" ? " (Ulysses all-to-all)" : "");
  if (dp > 1) text += ", " + std::to_string(dp) + " data-parallel replicas";
  return text;
}

int train(int argc, char** argv) {
  using examples::integer_in, examples::number_in, examples::Scope;
  std::shared_ptr<parallel::ProcessGroup> world = parallel::init(argc, argv);  // the MPI ranks, else one
  examples::Flags flags("Train a character-level GPT on the fortunes text");
  std::string preset = "cpu", device_name = "cpu", metrics = "char_gpt.csv", fortunes_dir = data::kFortunesDir;
  std::string tensorboard;
  models::GPTConfig config{.vocab_size = 0, .block_size = 64, .n_layer = 2, .n_head = 4, .n_embd = 128, .dropout = 0};
  int64_t steps = 1500, batch = 16, eval_every = 250, eval_batches = 20, sample_chars = 400;
  double lr = 2e-3, weight_decay = 0.1;
  uint64_t seed = 0;
  int tp = 1, dp = 1, cp = 1;
  bool sequence_parallel = false, cuda_graph = false;
  std::string precision = "fp32", cp_exchange = "all-gather";
  flags.add("--preset", preset, "cpu (the defaults) or shakespeare (nanoGPT's GPU shape)", Scope::Run,
            CLI::IsMember({"cpu", "shakespeare"}));
  auto* steps_flag = flags.add("--steps", steps, "optimizer steps", Scope::Run, integer_in<int64_t>(1, 1e9));
  flags.add("--batch-size", batch, "sequences per step", Scope::Run, integer_in<int64_t>(1, 1 << 20));
  flags.add("--block-size", config.block_size, "context length", Scope::Run, integer_in<int64_t>(1, 1 << 20));
  flags.add("--layers", config.n_layer, "transformer blocks", Scope::Run, integer_in<int64_t>(1, 1024));
  flags.add("--heads", config.n_head, "attention heads", Scope::Run, integer_in<int64_t>(1, 1024));
  flags.add("--embd", config.n_embd, "embedding width (a multiple of --heads)", Scope::Run,
            integer_in<int64_t>(1, 1 << 16));
  flags.add("--dropout", config.dropout, "dropout", Scope::Run, number_in(0, 0.99));
  flags.add("--lr", lr, "peak learning rate (warm-up, then cosine)", Scope::Run, number_in(0, 1e6));
  flags.add("--weight-decay", weight_decay, "AdamW weight decay on matrices", Scope::Run, number_in(0, 1e6));
  flags.add("--device", device_name, "cpu or cuda[:N]", Scope::Rank, examples::device_name());
  flags.add("--eval-every", eval_every, "steps between validation estimates", Scope::Run,
            integer_in<int64_t>(1, 1e9));
  flags.add("--sample", sample_chars, "characters to generate at the end", Scope::Run, integer_in<int64_t>(0, 1e7));
  flags.add("--metrics", metrics, "metrics CSV", Scope::Rank);
  flags.add("--tensorboard", tensorboard, "folder for TensorBoard event files (rank 0 writes; docs/examples.md)",
            Scope::Rank);
  flags.add("--seed", seed, "random seed", Scope::Run);
  flags.add("--fortunes", fortunes_dir, "folder of fortune files (the text)", Scope::Rank);
  flags.add("--precision", precision,
            "fp32, or bf16 / fp16: the forward under autocast (fp16 with a GradScaler); fp8: bf16 autocast with the "
            "blocks' Linear layers in float8 (nn/float8_training.h); weights stay fp32",
            Scope::Run, CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  flags.add("--tp", tp, "tensor-parallel ranks per replica", Scope::Job, integer_in(1, 64));
  flags.add("--dp", dp, "data-parallel replicas (DDP), each on its share of every batch; mpirun -np = dp x tp",
            Scope::Job, integer_in(1, 1024));
  flags.add("--cp", cp,
            "context-parallel ranks per replica, each on 1/cp of every sequence (an early and a late chunk); "
            "with --tp, each on 1/cp of every sequence and 1/tp of the model",
            Scope::Job, integer_in(1, 64));
  flags.add("--cp-exchange", cp_exchange,
            "with --cp: all-gather (every rank's keys and values at once), ring (a rank's block at a time, "
            "passed round the ranks behind the attention's products: ring attention) or all-to-all (each rank "
            "attends with 1/cp of the heads over the whole sequence: Ulysses)",
            Scope::Job, CLI::IsMember({"all-gather", "ring", "all-to-all"}));
  flags.add_switch("--sequence-parallel", sequence_parallel,
                   "with --tp: the layer norms, residuals and dropouts between the tensor-parallel layers run on "
                   "1/tp of the tokens (Megatron's sequence parallelism)",
                   Scope::Job);
  flags.add_switch("--cuda-graph", cuda_graph,
                   "CUDA, one device: capture the training step once and replay it every step",
                   Scope::Run);
  flags.parse(argc, argv);
  LOOM_CHECK(!cuda_graph || dp * tp * cp == 1, "--cuda-graph captures one device's step: it does not take --dp, "
             "--tp or --cp, whose collectives run on other streams");
  LOOM_CHECK(dp * tp * cp == world->size(), "--dp ", dp, " x --tp ", tp, " x --cp ", cp, " with ", world->size(),
             " process(es): tensor parallelism takes one rank per slice, context parallelism one per share of the "
             "sequence, data parallelism one set of them per replica (mpirun -np ", dp * tp * cp, ")");
  LOOM_CHECK(!sequence_parallel || cp == 1, "--sequence-parallel with --cp: context parallelism already gives each ",
             "rank its share of the sequence; the tensor-parallel layers run on it whole");
  LOOM_CHECK(cp_exchange == "all-gather" || cp > 1, "--cp-exchange ", cp_exchange, " passes the keys and values ",
             "between context-parallel ranks: it needs --cp 2 or more");
  LOOM_CHECK(!sequence_parallel || tp > 1,
             "--sequence-parallel splits the tokens over the --tp ranks: it needs --tp 2 or more");
  LOOM_CHECK(precision != "fp8" || tp == 1, "--precision fp8 runs nn::Linear layers in float8; the tensor-parallel ",
             "layers of --tp have no float8 mode");
  if (preset == "shakespeare") {  // nanoGPT's config/train_shakespeare_char.py
    config = {0, 256, 6, 6, 384, 0.2};
    batch = 64;
    lr = 1e-3;
    steps = steps_flag->count() ? steps : 5000;
  }
  LOOM_CHECK(config.n_embd % config.n_head == 0, "--embd ", config.n_embd, " does not split over --heads ",
             config.n_head);
  LOOM_CHECK(config.n_head % tp == 0, "--heads ", config.n_head, " does not split over --tp ", tp, " ranks");
  LOOM_CHECK(!sequence_parallel || config.block_size % tp == 0, "--sequence-parallel: --block-size ", config.block_size,
             " does not split over --tp ", tp, " ranks");
  LOOM_CHECK(batch % dp == 0, "--batch-size ", batch, " does not split over --dp ", dp, " replicas");
  LOOM_CHECK(cp == 1 || config.block_size % (2 * cp) == 0, "--cp ", cp, ": --block-size ", config.block_size,
             " does not split into two chunks for each of the ", cp, " ranks");
  examples::RunFiles files;  // the metrics may not land among the text files it reads
  files.reads_folder("--fortunes", fortunes_dir);
  files.writes("--metrics", metrics);
  if (!tensorboard.empty()) files.writes("--tensorboard", tensorboard);
  files.check();

  // The ranks agree on their settings and pick their devices; rank 0 prints and writes.
  const examples::Rank me = examples::join_job(world, flags, device_name);
  const Device device = me.device;
  // rank = (replica * cp + share) * tp + slice: a replica's ranks are neighbours.
  parallel::DeviceMesh mesh(me.group, {{"data", dp}, {"context", cp}, {"tensor", tp}});
  const bool writer = world->rank() == 0;
  manual_seed(seed);
  data::CharCorpus corpus = data::CharCorpus::fortunes(fortunes_dir);
  examples::check_ranks_read_the_same_text(*world, corpus, "--fortunes");  // every rank, the same data
  data::CharDataset train(corpus.train, config.block_size), validation(corpus.validation, config.block_size);
  // Tensor parallel: the vocabulary padded to a multiple of the ranks (as Megatron does); the padding's
  // tokens never occur, and sampling never draws them.
  const int64_t vocab = corpus.vocab.size();
  config.vocab_size = (vocab + tp - 1) / tp * tp;
  models::GPT model(config);  // on every rank alike (same seed): the parallel transforms cut it in place
  // float8: the blocks' attention and MLP projections. Not the head, as torchtitan's float8 converter
  // leaves the output layer (the fortunes' vocabulary of 114 is no multiple of 16 either).
  const std::vector<std::string> float8_layers =
      precision == "fp8" ? nn::convert_to_float8_training(
                               *model, [](const std::string& name, const nn::LinearImpl&) { return name != "head"; })
                         : std::vector<std::string>();
  // Tensor parallel: each rank keeps its slices, by the GPT's plan. Context parallel: each rank runs
  // the model on its share of every sequence (an early and a late chunk).
  models::GptLayout layout;
  parallel::TensorParallel tensor_parallel;
  if (tp > 1) {
    tensor_parallel = parallel::parallelize(*model, mesh.group("tensor"),
                                            models::gpt_tensor_parallel_plan(sequence_parallel));
    layout.tensor = mesh.group("tensor");
    layout.sequence_parallel = sequence_parallel;
  }
  constexpr auto kZigZag = parallel::SequenceSplit::kZigZag;
  if (cp > 1) {
    const auto exchange = cp_exchange == "ring"         ? parallel::KeyValueExchange::kRing
                          : cp_exchange == "all-to-all" ? parallel::KeyValueExchange::kAllToAll
                                                        : parallel::KeyValueExchange::kAllGather;
    parallel::context_parallel(*model, mesh.group("context"),
                               models::gpt_context_parallel({.split = kZigZag, .exchange = exchange}));
    layout.context = mesh.group("context");
    layout.split = kZigZag;
  }
  model->to(device);
  // Tensor and context parallelism hold parts of the model and of each sequence: a step of the plain
  // model is not what they need, and measuring theirs would run collectives. Those runs are not checked.
  if (tp * cp == 1)
    examples::check_text_step_memory(*model, [&](const Tensor& x) { return model->forward(x); }, batch, dp,
                                     config.block_size, 2, device,  // AdamW: two moments
                                     "a smaller --embd, --layers or --block-size");
  // DDP averages every gradient over the ranks that hold the same weights: the same slices, in
  // every replica and every share of the sequence.
  parallel::DistributedDataParallel replica{nullptr};
  if (dp * cp > 1) replica = parallel::DistributedDataParallel(model, mesh.group({"data", "context"}));
  // As nanoGPT: weight decay on tensors of two or more dims (matrices, embeddings), none on biases and norms.
  TensorList decay, no_decay;
  for (auto& [name, p] : model->named_parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  optim::AdamW opt_decay(decay, {.lr = lr, .beta2 = 0.99, .weight_decay = weight_decay, .capturable = cuda_graph});
  optim::AdamW opt_plain(no_decay, {.lr = lr, .beta2 = 0.99, .weight_decay = 0, .capturable = cuda_graph});
  // In tensor parallel each rank sees its slices' gradients: the ranks agree on skipping a step.
  const optim::GradScalerOptions scaling{.enabled = precision == "fp16", .capturable = cuda_graph};
  std::unique_ptr<optim::GradScaler> scaler_owner =
      tp > 1 ? std::make_unique<parallel::ShardedGradScaler>(world, scaling) : std::make_unique<optim::GradScaler>(scaling);
  optim::GradScaler& scaler = *scaler_owner;
  const int64_t warmup = std::max<int64_t>(1, steps / 20);
  auto schedule = [&](optim::Optimizer& opt) {
    auto warm = std::make_shared<optim::LinearLR>(opt, 0.01, 1.0, warmup);
    auto cosine = std::make_shared<optim::CosineAnnealingLR>(opt, std::max<int64_t>(1, steps - warmup), lr / 10);
    return std::make_unique<optim::SequentialLR>(opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cosine},
                                                 std::vector<int64_t>{warmup});
  };
  auto schedule_decay = schedule(opt_decay), schedule_plain = schedule(opt_plain);
  if (writer)
    std::printf("vocabulary %lld, %lld training tokens, %lld parameters%s, on %s\n", static_cast<long long>(vocab),
                static_cast<long long>(corpus.train.numel()), static_cast<long long>(model->num_parameters()),
                layout_text(dp, tp, cp, sequence_parallel, cp_exchange).c_str(),
                device.str().c_str());
  if (writer && !float8_layers.empty())
    std::printf("float8 training: %zu Linear layers (%s, ...), the rest under bf16 autocast\n", float8_layers.size(),
                float8_layers.front().c_str());

  const examples::TextTrainingConfig training{.steps = steps, .batch = batch, .block_size = config.block_size,
                                              .eval_every = eval_every, .eval_batches = eval_batches, .seed = seed,
                                              .metrics = metrics, .tensorboard = tensorboard, .device = device,
                                              .writer = writer};
  examples::LanguageModel logits = nullptr;  // the whole vocabulary's logits, for the loss estimates
  if (tp * cp > 1) logits = [&](const Tensor& idx) { return models::whole_logits(*model, layout, idx); };
  examples::TextRun run(training, *model, train, validation, logits);
  const int64_t share = batch / dp, first = share * mesh.coordinate("data");  // this replica's rows of a batch
  auto train_step = [&](const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      AutocastGuard autocast(autocast_dtype_for(precision));
      const Tensor logits = replica ? replica->forward(x) : model->forward(x);
      loss = tp > 1 ? parallel::vocab_parallel_cross_entropy(logits, y, mesh.group("tensor"))
                    : examples::next_token_loss(logits, y);
    }
    opt_decay.zero_grad();
    opt_plain.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(opt_decay);  // clip the true gradients
    scaler.unscale_(opt_plain);
    if (tp > 1)
      tensor_parallel.clip_grad_norm_(1.0);  // the slices' norms summed over the tensor group
    else
      optim::clip_grad_norm_(model->parameters(), 1.0);
    scaler.step(opt_decay);
    scaler.step(opt_plain);
    scaler.update();
    return loss;
  };
  examples::GraphedStep graphed(cuda_graph, device);  // with --cuda-graph, replays of one captured step
  for (int64_t step = 1; step <= steps; ++step) {
    auto [x, y] = run.next_batch();  // the same batch on every rank
    if (dp > 1) {
      x = x.narrow(0, first, share);
      y = y.narrow(0, first, share);
    }
    if (cp > 1) {  // this rank's tokens of every sequence
      x = parallel::shard_sequence(x, *mesh.group("context"), kZigZag);
      y = parallel::shard_sequence(y, *mesh.group("context"), kZigZag);
    }
    const Tensor loss = graphed(x, y, train_step);
    schedule_decay->step();
    schedule_plain->step();
    run.step_done(step, loss, opt_decay.lr());
  }
  run.finish("char_gpt", corpus.vocab,
             [&](const Tensor& idx, int64_t n, double t, Generator* g) {
               return models::generate(*model, layout, idx, n, t, g, vocab);
             },
             sample_chars);
  return 0;
}

int main(int argc, char** argv) {
  // A rank that fails ends the whole job at once: the others may be waiting for it.
  return examples::run_program("char_gpt", [&] { return train(argc, argv); }, parallel::abandon_job);
}
