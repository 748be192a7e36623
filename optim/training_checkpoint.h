// A whole training state in one safetensors file: the model's parameters
// and buffers ("model.*"), the optimizer's state ("optim.*"), the epoch and
// the random generator's state (metadata), so a run can stop and resume
// exactly where it was.
//
//   optim::save_training_checkpoint("run.safetensors", *model, opt, {.epoch = 3});
//   optim::TrainingProgress p = optim::load_training_checkpoint("run.safetensors", *model, opt);
//   for (int64_t epoch = p.epoch + 1; ...)
#pragma once

#include <map>
#include <string>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace loom::optim {

struct TrainingProgress {
  int64_t epoch = 0;  // the last finished epoch
  int64_t step = 0;   // optimizer steps so far
  std::map<std::string, std::string> extra{};  // anything else the program saved
};

// Written atomically (nn::save_safetensors); includes default_generator()'s state.
void save_training_checkpoint(const std::string& path, const nn::Module& model, const Optimizer& optimizer,
                              const TrainingProgress& progress);

// Restores model, optimizer and default_generator(); returns the progress.
// A missing or corrupt file, or one for another model, is a clear error.
TrainingProgress load_training_checkpoint(const std::string& path, nn::Module& model, Optimizer& optimizer);

}  // namespace loom::optim
