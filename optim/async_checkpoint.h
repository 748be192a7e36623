// AsyncCheckpoint: training checkpoints written by a background thread, so
// that training does not wait for the disk (as PyTorch's
// torch.distributed.checkpoint.async_save).
//
//   optim::AsyncCheckpoint saver;
//   saver.save("run.safetensors", *model, opt, progress, writer);  // copies the state now, returns
//   ... training goes on; after each step:
//   saver.check();   // rethrows a write that failed
//   ... at the end:
//   saver.wait();    // the file is in place, or its error is thrown
//
// save() takes a snapshot on the calling thread, at a step boundary
// (snapshot_training_state: every tensor copied to host memory, the random
// state read), so the step that follows may change the weights at once; the
// background thread writes the snapshot through the same atomic writer as a
// synchronous save (AtomicFile: a temporary, fsync, rename), so a kill at any
// moment leaves the previous checkpoint in place and loadable. The file is
// byte for byte what save_training_checkpoint would have written at the
// snapshot.
//
// Never two at once: a save while the previous one is still being written
// waits for it first (and rethrows its error). Skipping instead would drop a
// commit, and with it, in the examples, an epoch's metrics row; waiting costs
// a step only when saves come faster than the disk takes them.
//
// Errors are never lost: a failed write is rethrown by the next check(),
// save() or wait(), once. The destructor waits for a write in flight; an
// error nobody collected is then printed on stderr.
//
// Costs: the snapshot's copy (on a GPU a device-to-host copy, which waits for
// the device), and host memory for one copy of the state until it is written.
//
// For tests only: LOOM_TEST_ASYNC_CHECKPOINT_DELAY_MS (0 to 600000) makes
// the background thread wait that long before it writes, so that a test can
// kill the process while a save is in flight.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <string>
#include <thread>

#include "optim/training_checkpoint.h"

namespace loom::optim {

class AsyncCheckpoint {
 public:
  AsyncCheckpoint() = default;
  ~AsyncCheckpoint();
  AsyncCheckpoint(const AsyncCheckpoint&) = delete;
  AsyncCheckpoint& operator=(const AsyncCheckpoint&) = delete;

  // Waits for the write in flight, if any, then snapshots the state and
  // starts writing it to `path`. `then`, if given, runs on the background
  // thread once the file is in place (the examples write their metrics CSV,
  // which must never run ahead of the checkpoint).
  void save(const std::string& path, const nn::Module& model, const Optimizer& optimizer,
            const TrainingProgress& progress, const CheckpointWriter& writer, std::function<void()> then = {});

  // Returns at once; rethrows the error of a write that has finished and failed.
  void check();
  // Waits for the write in flight; rethrows its error.
  void wait();
  // Whether a write is still running.
  bool in_flight() const { return thread_.joinable() && !done_.load(); }

 private:
  void join_and_rethrow();

  std::thread thread_;
  std::atomic<bool> done_{true};
  std::exception_ptr error_;  // set by the thread before done_
  std::string path_;          // of the write in flight, or the last one
};

}  // namespace loom::optim
