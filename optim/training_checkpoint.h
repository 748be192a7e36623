// A whole training state in one safetensors file: the model's parameters
// and buffers ("model.*"), the optimizer's state ("optim.*"), the epoch, the
// random generator's state and who wrote the file (metadata), so a run can
// stop and resume exactly where it was.
//
//   const optim::CheckpointWriter me{.program = "fashion_mnist_cnn", .layout = "one device"};
//   optim::save_training_checkpoint("run.safetensors", *model, opt, {.epoch = 3}, me);
//   optim::TrainingProgress p = optim::load_training_checkpoint("run.safetensors", *model, opt, me);
//   for (int64_t epoch = p.epoch + 1; ...)
//
// The metadata: "epoch", "step", "rng_seed", "rng_offset" (decimal digits),
// "program" and "layout" (the CheckpointWriter), "optimizer_params" (a JSON
// list: the model's name for each of the optimizer's parameters, in its
// order; "" for one the model does not have), and the caller's `extra`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace loom::optim {

struct TrainingProgress {
  int64_t epoch = 0;  // the last finished epoch
  int64_t step = 0;   // optimizer steps so far
  std::map<std::string, std::string> extra{};  // anything else the program saved
};

// Who writes a checkpoint: the program, and the layout of the training state
// it saves: the strategy, with whatever decides which state the file holds
// ("one device", "ddp", "pipeline stage 1 of 2", "fsdp 2 ranks"). A count
// that does not change what the file holds stays out of it (DDP's world
// size: rank 0 holds the whole state), so that a run may resume at another.
// A checkpoint resumes only a run of the same program and layout.
struct CheckpointWriter {
  std::string program;
  std::string layout;
};

// Written atomically (nn::save_safetensors); includes default_generator()'s state.
void save_training_checkpoint(const std::string& path, const nn::Module& model, const Optimizer& optimizer,
                              const TrainingProgress& progress, const CheckpointWriter& writer);

// What save_training_checkpoint writes, copied at one moment: the tensors
// as contiguous host copies (training may change the originals at once) and
// the metadata, the random state included. A background thread can write it
// while training goes on (optim/async_checkpoint.h); the file is the one
// save_training_checkpoint would have written then, byte for byte.
struct TrainingSnapshot {
  nn::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};
TrainingSnapshot snapshot_training_state(const nn::Module& model, const Optimizer& optimizer,
                                         const TrainingProgress& progress, const CheckpointWriter& writer);
// Writes a snapshot atomically, as save_training_checkpoint writes.
void write_training_snapshot(const std::string& path, const TrainingSnapshot& snapshot);

// A training checkpoint read and checked, nothing restored yet: a caller can
// compare the progress's extra settings with its own before restoring (a
// resume with another --width is then refused by the flag's name, not by a
// shape).
struct TrainingCheckpoint {
  std::string path;
  CheckpointWriter writer;
  TrainingProgress progress;
  nn::NamedTensors model_state, optimizer_state;  // without their "model." and "optim." prefixes
  std::vector<std::string> optimizer_params;      // the model's name for each of the optimizer's parameters
  GeneratorState rng;
};

// Reads `path`; a missing, damaged or foreign file, or one that another
// program or layout than `this_run` wrote, is a clear error.
TrainingCheckpoint read_training_checkpoint(const std::string& path, const CheckpointWriter& this_run);

// Restores model, optimizer and default_generator(). First checks that the
// optimizer steps the parameters the file's did, in the same order, and that
// the file has the whole of its state: for every parameter its step count
// and, once it has stepped, each of state_names(), shaped like it. An error
// names the parameter and the missing entry; nothing is changed.
void restore_training_checkpoint(const TrainingCheckpoint& checkpoint, nn::Module& model, Optimizer& optimizer);

// read_training_checkpoint, then restore_training_checkpoint; returns the progress.
TrainingProgress load_training_checkpoint(const std::string& path, nn::Module& model, Optimizer& optimizer,
                                          const CheckpointWriter& this_run);

}  // namespace loom::optim
