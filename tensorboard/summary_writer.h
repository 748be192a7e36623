// SummaryWriter: training metrics as TensorBoard event files, written by
// loom itself (no TensorFlow, no protobuf library), with PyTorch's API
// (torch.utils.tensorboard.SummaryWriter).
//
//   tensorboard::SummaryWriter writer("runs/cnn");   // creates the folder; fails now if it cannot write there
//   writer.add_scalar("loss_metrics/global_avg_loss", loss, step);
//   writer.add_scalar("lr", optimizer.lr(), step);
//   writer.add_histogram("weights/fc.weight", model->fc->weight, step);
//   writer.flush();                                   // or let it flush every 10 records / 120 s, and on close
//
//   $ tensorboard --logdir runs
//
// Each writer makes one new file in its folder,
// events.out.tfevents.<10-digit Unix seconds>.<host>.<pid>.<n>, named as
// PyTorch names them (TensorBoard reads any file whose name holds
// "tfevents"): the pid and n keep two writers started in the same second,
// say a run and its --resume, from sharing a file. Its first record is the
// file_version event "brain.Event:2"; each scalar or histogram is one more
// record (tensorboard/event.h has the format).
//
// Safe to read while it is written: TensorBoard tails the file as it grows,
// so records are only ever appended, whole, by one write() of everything
// buffered. A reader that looks between two writes sees complete records; one
// that looks during a write (or after a crash in one) sees a last record cut
// short, which TensorBoard's reader treats as "not yet written" and reads
// again from its start on the next poll, as it does for TensorFlow's own
// files. A rename-into-place writer (AtomicFile) cannot serve here: the file
// is an appending log that readers keep open (docs/architecture.md, "Files:
// nothing half-written").
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace loom::tensorboard {

struct SummaryWriterOptions {
  int max_queue = 10;                // records buffered before they are written (PyTorch's max_queue)
  double flush_secs = 120;           // the longest a record waits to be written (PyTorch's flush_secs)
  std::string filename_suffix = "";  // appended to the file's name
};

class SummaryWriter {
 public:
  // Creates `log_dir` (and its parents) if needed and the event file in it;
  // throws loom::Error naming the folder if either cannot be made.
  explicit SummaryWriter(std::string log_dir, SummaryWriterOptions options = {});
  // Closes as close() does; an error there is printed to stderr, since a
  // destructor cannot throw.
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // `value` at `global_step`, stamped with the time now (or `walltime`,
  // seconds since the Unix epoch). Stored as a float, as TensorBoard's
  // simple_value is.
  void add_scalar(const std::string& tag, double value, int64_t global_step);
  void add_scalar(const std::string& tag, double value, int64_t global_step, double walltime);
  // The values' distribution in `bins` equal buckets from their least to
  // their greatest (PyTorch's add_histogram with bins=N). A tensor is read
  // on the host: on a GPU this waits for it.
  void add_histogram(const std::string& tag, const std::vector<double>& values, int64_t global_step, int bins = 64);
  void add_histogram(const std::string& tag, const Tensor& values, int64_t global_step, int bins = 64);

  // Writes every buffered record to the file (readers see them now).
  void flush();
  // Flushes, syncs the file to disk and closes it; later adds throw. Idempotent.
  void close();

  const std::string& log_dir() const { return log_dir_; }  // PyTorch's get_logdir()
  const std::string& file() const { return path_; }        // the event file

 private:
  void append(const std::string& event);  // under mutex_
  void write_buffered();                  // under mutex_

  std::string log_dir_, path_;
  SummaryWriterOptions options_;
  std::mutex mutex_;  // adds may come from several threads, as PyTorch's may
  int fd_ = -1;
  std::string buffer_;  // whole records not yet written
  int buffered_records_ = 0;
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

}  // namespace loom::tensorboard
