// The Fashion-MNIST CNN training loop, shared by the single-device example
// and its DataParallel, DistributedDataParallel and pipeline versions, so
// that they differ only in how the model is wrapped and the data is shared out.
//
//   FashionMnistConfig config;
//   Flags flags("...");  add_fashion_mnist_flags(flags, config);  flags.parse(argc, argv);
//   train_fashion_mnist(config, flags, Strategy::single());
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "examples/common/flags.h"
#include "nn/module.h"
#include "parallel/comm/process_group.h"

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
  bool resume = false;
};

// Registers the flags every version shares, with their valid ranges and scopes.
void add_fashion_mnist_flags(Flags& flags, FashionMnistConfig& config);

// How this process takes part in training.
struct Strategy {
  // Turns the model (already on its device) into the module whose forward
  // trains it: the model itself, a DataParallel, a DistributedDataParallel.
  // A pipeline builds itself around the model here and returns the model.
  std::function<nn::ModulePtr(const nn::ModulePtr& model)> wrap;
  // DDP and pipelines over ranks: this process's group, from join_job
  // (ranks.h), which has checked that the ranks were started alike.
  std::shared_ptr<parallel::ProcessGroup> group;
  // Pipelines: forward and backward of one batch in place of the wrapped
  // module's; returns the batch loss (undefined on ranks that do not have it).
  std::function<Tensor(const Tensor& x, const Tensor& y)> train_step;
  // DDP: each rank reads its share of every global batch. Pipelines over
  // ranks: every rank reads the whole batch (rank 0 uses the images, the
  // last rank the labels).
  bool shard_batches = true;
  // The rank that prints progress and writes metrics and checkpoints (a
  // pipeline's last rank: it has the loss).
  int reporting_rank = 0;
  // The fewest images a batch may have (a pipeline: one per micro-batch).
  int64_t min_batch = 1;
  // Runs before each evaluation (a pipeline over ranks gathers the stages' weights).
  std::function<void()> before_evaluation;

  static Strategy single() {
    Strategy s;
    s.wrap = [](const nn::ModulePtr& model) { return model; };
    return s;
  }
};

// Trains, evaluating on the test set after every epoch; the last line printed
// is RESULT {json}. Throws on any error (run_program reports it). Before any
// work the outputs are checked to be writable, and a resumed checkpoint must
// come from a run with the same Run settings.
void train_fashion_mnist(FashionMnistConfig config, const Flags& flags, const Strategy& strategy);

}  // namespace loom::examples
