// Progress reporting shared by the examples: a live progress line (or plain
// periodic lines when the output is not a terminal), and a metrics CSV
// rewritten atomically.
//
//   Progress progress(steps_per_epoch * epochs, /*every=*/100);
//   progress.update(step, loss, samples_per_s);     // "step 120/2345 loss 0.41 ... ETA 2m13s"
//   progress.set_flops(flops_per_sample, peak);     // then "... ETA 2m13s  2.1 GFLOP/s (MFU 14%)"
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
  // From now on each line ends with the FLOP rate samples_per_second makes,
  // and its MFU against peak_flops_per_s (parallel/planner/mfu.h) when that is not 0.
  void set_flops(double flops_per_sample, double peak_flops_per_s);
  // The MFU samples_per_second makes (a fraction); 0 before set_flops or without a peak.
  double mfu(double samples_per_second) const;

 private:
  int64_t total_, every_;
  bool terminal_;
  bool line_open_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  int64_t first_step_;
  double flops_per_sample_ = 0, peak_flops_ = 0;
};

// A CSV with a header, rewritten whole and atomically after each append, so
// an interrupted run never leaves a half-written file. An empty path keeps
// the rows in memory only.
class MetricsCsv {
 public:
  MetricsCsv(std::string path, std::vector<std::string> columns);
  // Appends a row and rewrites the file.
  void append(const std::vector<double>& row);
  // Appends a row without writing (write() follows).
  void add(const std::vector<double>& row);
  void write() const;

  // The whole file as text, and the reverse: takes the rows of a text this
  // class wrote (a checkpoint keeps it); it must have the same columns.
  std::string text() const;
  void restore(const std::string& text, const std::string& origin);
  size_t rows() const { return rows_.size(); }

 private:
  std::string path_;
  std::string header_;
  size_t columns_;
  std::vector<std::string> rows_;  // formatted lines, without their newline
};

std::string format_duration(double seconds);  // "2m13s"

}  // namespace loom::examples
