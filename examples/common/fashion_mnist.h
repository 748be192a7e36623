// What the Fashion-MNIST examples share — the nouns of a training run: its
// flags, data, model and optimizer, progress line, per-epoch evaluation,
// checkpoint and metrics, and RESULT line. Each example writes its own
// training loop with them, so that the single-device, DataParallel, DDP and
// pipeline versions differ only where their strategies do:
//
//   FashionMnist run(config, flags, device);       // resumes when --resume says so, mid-epoch too
//   for (int64_t epoch = run.first_epoch(); epoch <= config.epochs; ++epoch) {
//     for (auto& [x, y] : run.batches(epoch)) {
//       Tensor loss = nn::functional::cross_entropy(run.model->forward(x), y);
//       run.optimizer.zero_grad();
//       loss.backward();
//       run.optimizer.step();
//       if (!run.step_done(loss)) break;           // schedule, progress line, trace window; false: a stop signal
//     }
//     if (!run.end_epoch(epoch)) break;            // evaluate, report, commit checkpoint and metrics
//   }
//   return run.finish();                           // the RESULT line; 0, or kExitPreempted after a stop
//
// SIGTERM or SIGUSR1 (examples/common/preemption.h) stops the run after a
// step, the same step on every rank: end_epoch then commits a checkpoint of
// that step (the position within the epoch, and the epoch's running loss
// sums, one per rank), and finish() returns kExitPreempted. --resume goes on
// from the next batch of the same epoch and ends where an uninterrupted run
// ends, metrics rows included.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataloader.h"
#include "examples/common/flags.h"
#include "examples/common/preemption.h"
#include "examples/common/progress.h"
#include "examples/common/run_record.h"
#include "nn/nn.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "parallel/comm/process_group.h"
#include "tensor/flop_counter.h"
#include "tensorboard/summary_writer.h"

namespace loom::examples {

struct FashionMnistConfig {
  std::string name = "fashion_mnist_cnn";  // names the outputs and the RESULT line
  int epochs = 5, width = 32, workers = 2, log_every = 100;
  int64_t batch_size = 128;  // global: summed over DataParallel replicas or DDP ranks
  int64_t max_steps_per_epoch = 0, stop_after_epoch = 0;
  double lr = 2e-3;
  uint64_t seed = 0;
  std::string device = "cpu", data_root;
  std::string metrics, checkpoint;  // default: <name>.csv, <name>.safetensors
  std::string trace;                // Chrome trace of a few steps (per rank: .rankN inserted); empty: none
  std::string tensorboard;          // folder for TensorBoard event files (the reporting rank's); empty: none
  bool resume = false;
  bool async_checkpoint = false;  // commits written by a background thread (RunRecord::Options::async)
  bool cuda_graph = false;  // the optimizer capturable (GraphedStep replays the step)
};

// Registers the flags every version shares, with their valid ranges and scopes.
void add_fashion_mnist_flags(Flags& flags, FashionMnistConfig& config);

// How the ranks of a job share the work (the default: one process).
struct Ranks {
  // The strategy, as the checkpoint records it (optim::CheckpointWriter): a
  // resume needs the same program and layout.
  std::string layout = "one device";
  std::shared_ptr<parallel::ProcessGroup> group{};  // null: one process
  // DDP: each rank reads its share of every global batch. A pipeline over
  // ranks: every rank reads the whole batch (the first stage uses the
  // images, the last the labels).
  bool shard_batches = true;
  int reporting_rank = 0;  // prints, writes metrics and checkpoints (a pipeline's last: it has the loss)
  int64_t min_batch = 1;   // the fewest images a batch may have (a pipeline: one per micro-batch)
};

struct Evaluation {
  double loss = 0, accuracy = 0;
};

class FashionMnist {
  // Declared first: what the public members are made from.
  FashionMnistConfig config_;
  Device device_;
  Ranks ranks_;

 public:
  // Checks the settings and outputs, loads the data, builds the CNN on
  // `device` and AdamW with a cosine schedule, and resumes from the
  // checkpoint when config.resume (the same Run settings, or a clear error).
  FashionMnist(FashionMnistConfig config, const Flags& flags, Device device, Ranks ranks = {});
  ~FashionMnist();

  nn::Sequential model;
  optim::AdamW optimizer;

  int64_t first_epoch() const { return progress_.epoch + 1; }
  // This rank's batches of `epoch`, at most --max-steps-per-epoch of them;
  // in an epoch resumed mid-way, those after the checkpoint's step.
  data::Epoch batches(int64_t epoch) const {
    return train_.epoch(epoch, steps_per_epoch_, epoch == resumed_epoch_ ? resumed_batch_ : 0);
  }
  // After each optimizer step. `loss` may be undefined (a pipeline rank
  // without it). False when the run stops after this step (a stop signal,
  // on every rank at the same step): leave the epoch's loop.
  bool step_done(const Tensor& loss);
  // After each epoch: evaluates the model on the test set, averages the train
  // loss over the ranks, reports, commits checkpoint and metrics. After a
  // stop mid-epoch: commits the checkpoint of the step instead. False when
  // the run stops here (a stop, or --stop-after-epoch).
  bool end_epoch(int64_t epoch);
  // Evaluates if no epoch did (nothing was left to train), and prints
  // RESULT. Returns main's status: 0, or kExitPreempted after a stop.
  int finish();

 private:
  bool reporting() const;
  void resume_mid_epoch(int64_t steps_into_epoch);
  void commit_stop();
  void commit_stop_checkpoint(const std::vector<float>& loss_sums);

  data::DataLoader train_, test_;
  int64_t steps_per_epoch_ = 0;
  std::optional<optim::CosineAnnealingLR> schedule_;
  optim::TrainingProgress progress_;
  std::unique_ptr<RunRecord> record_;
  std::unique_ptr<Progress> bar_;
  std::unique_ptr<tensorboard::SummaryWriter> board_;  // --tensorboard, on the reporting rank
  class StepTracer;
  std::unique_ptr<StepTracer> tracer_;
  std::unique_ptr<StopAgreement> stop_;
  bool stopping_ = false;
  int64_t resumed_epoch_ = 0, resumed_batch_ = 0;  // an epoch resumed mid-way, and its first batch
  int64_t epoch_first_step_ = 0;                   // the step this process began the epoch at
  Tensor loss_sum_;                                // this rank's train losses of the epoch so far
  int trace_lane_ = 0;
  int64_t step_begin_us_ = 0;
  std::chrono::steady_clock::time_point start_, epoch_start_;
  std::optional<Evaluation> result_;
  double samples_per_second_ = 0;
  // The first step's FLOPs, counted on the reporting rank while it runs
  // (tensor/flop_counter.h), and the device's peak: the progress line's
  // FLOP/s and MFU (parallel/planner/mfu.h).
  FlopCounter step_flops_;
  std::unique_ptr<FlopCounter::Scope> counting_;
  double peak_flops_ = 0;
};

}  // namespace loom::examples
