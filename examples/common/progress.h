// Progress reporting and run records shared by the examples: a live progress
// line (or plain periodic lines when the output is not a terminal), a metrics
// CSV rewritten atomically, and the closing RESULT line.
//
//   Progress progress(steps_per_epoch * epochs, /*every=*/100);
//   progress.update(step, loss, samples_per_s);     // "step 120/2345 loss 0.41 ... ETA 2m13s"
//   MetricsCsv csv("metrics.csv", {"epoch", "train_loss", "test_accuracy"});
//   csv.append({1, 0.52, 0.88});
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace loom::examples {

class Progress {
 public:
  // Counts from `first_step` (nonzero when resuming), timing from now.
  Progress(int64_t total_steps, int64_t print_every, int64_t first_step = 0);
  // After step `step` (1-based); prints when due.
  void update(int64_t step, double loss, double samples_per_second);
  // Ends a live line before other output.
  void finish_line();

 private:
  int64_t total_, every_;
  bool terminal_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t first_step_;
};

// A CSV with a header, rewritten whole after each append (temporary file,
// then rename), so an interrupted run never leaves a half-written file.
class MetricsCsv {
 public:
  MetricsCsv(std::string path, std::vector<std::string> columns);
  // Keeps the rows of an earlier run (when resuming) up to and including `epoch`.
  void load_existing(double up_to_epoch);
  void append(const std::vector<double>& row);

 private:
  void write() const;
  std::string path_;
  std::vector<std::string> columns_;
  std::vector<std::vector<double>> rows_;
};

std::string format_duration(double seconds);  // "2m13s"

}  // namespace loom::examples
