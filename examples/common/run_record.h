// What a training run leaves on disk, and how it continues after a stop.
//
// After every epoch (and mid-epoch when a run is told to stop), a checkpoint (model, optimizer, progress, random state,
// the settings that define the run, and the metrics rows so far) and a
// metrics CSV. The checkpoint is the one commit: it is written first,
// atomically, and holds the rows; the CSV is written from it afterwards and
// rewritten from it on resume. So a kill between the two writes loses nothing,
// and a damaged or edited CSV is never read back.
//
//   RunRecord record({.checkpoint = "run.safetensors", .metrics = "run.csv",
//                     .columns = {"epoch", "test_accuracy"}, .settings = flags.settings({Scope::Run}),
//                     .writer = {.program = "fashion_mnist_cnn", .layout = "one device"}});
//   record.check_writable();                                  // before any training
//   optim::TrainingProgress progress;
//   if (resume) progress = record.resume(*model, opt);        // the same settings, or a clear error
//   ... after each epoch:
//   record.commit_epoch(*model, opt, progress, {epoch, accuracy});
//   ... or, stopping mid-epoch (the position within the epoch is in progress.step):
//   record.commit_step(*model, opt, progress);
#pragma once

#include <map>
#include <string>
#include <vector>

#include "examples/common/progress.h"
#include "nn/module.h"
#include "optim/async_checkpoint.h"
#include "optim/optimizer.h"
#include "optim/training_checkpoint.h"

namespace loom::examples {

class RunRecord {
 public:
  struct Options {
    std::string checkpoint;                       // written after every epoch
    std::string metrics;                          // the CSV; empty: none (ranks that do not report)
    std::vector<std::string> columns;             // of the CSV
    std::map<std::string, std::string> settings;  // must be the same when resuming
    optim::CheckpointWriter writer;               // must be the same when resuming
    // Commits by a background thread (optim/async_checkpoint.h): a commit
    // returns once the state is copied; the CSV follows its checkpoint there.
    bool async = false;
  };
  explicit RunRecord(Options options);

  // Fails now if the checkpoint or the CSV could not be written later.
  void check_writable() const;

  // Restores model, optimizer and random state from the checkpoint and
  // returns the progress; rewrites the CSV from it. The checkpoint must have
  // been written by the same program and layout, with the same settings, and
  // hold one metrics row per finished epoch; all of that is checked before
  // the state is restored, so a resume with another --width names the flag.
  optim::TrainingProgress resume(nn::Module& model, optim::Optimizer& optimizer);

  // After an epoch: appends the row, commits the checkpoint, then writes the CSV.
  void commit_epoch(const nn::Module& model, const optim::Optimizer& optimizer, optim::TrainingProgress progress,
                    const std::vector<double>& row);
  // Mid-epoch (a run told to stop): commits the checkpoint with the rows so
  // far; progress.extra holds what the caller needs to finish the epoch
  // exactly (its running sums). The CSV has not changed and is not rewritten.
  void commit_step(const nn::Module& model, const optim::Optimizer& optimizer, optim::TrainingProgress progress);

  // Async commits: check() rethrows the error of a commit that failed (call
  // it after each step); wait() waits for the commit in flight and rethrows
  // its error (before the program ends). Both return at once otherwise.
  void check() { async_.check(); }
  void wait() { async_.wait(); }

 private:
  void commit(const nn::Module& model, const optim::Optimizer& optimizer, optim::TrainingProgress progress,
              bool write_csv);

  Options options_;
  MetricsCsv csv_;
  optim::AsyncCheckpoint async_;  // its destructor waits for a commit in flight
};

}  // namespace loom::examples
