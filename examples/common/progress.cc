#include "examples/common/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tensor/error.h"
#include "tensor/file_io.h"
#include "tensor/stopwatch.h"

namespace loom::examples {

std::string format_duration(double seconds) {
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  std::ostringstream out;
  if (s >= 3600) out << s / 3600 << 'h';
  if (s >= 60) out << (s % 3600) / 60 << 'm';
  out << s % 60 << 's';
  return out.str();
}

Progress::Progress(int64_t total_steps, int64_t print_every, int64_t first_step)
    : total_(total_steps), every_(std::max<int64_t>(1, print_every)), terminal_(isatty(fileno(stdout))),
      first_step_(first_step) {}

void Progress::update(int64_t step, double loss, double samples_per_second) {
  const bool due = terminal_ || step % every_ == 0 || step == total_;
  if (!due) return;
  const double elapsed = seconds_since(start_);
  const double per_step = step > first_step_ ? elapsed / (step - first_step_) : 0;
  // Appended after the ETA, so that what reads the line's start still does.
  char flops[64] = "";
  const double rate = samples_per_second * flops_per_sample_;
  if (rate > 0 && peak_flops_ > 0)
    std::snprintf(flops, sizeof flops, "  %.1f GFLOP/s (MFU %.0f%%)", rate / 1e9, 100 * mfu(samples_per_second));
  else if (rate > 0)
    std::snprintf(flops, sizeof flops, "  %.1f GFLOP/s", rate / 1e9);
  std::printf("%sstep %lld/%lld  loss %.4f  %.0f samples/s  ETA %s%s%s", terminal_ ? "\r" : "",
              static_cast<long long>(step), static_cast<long long>(total_), loss, samples_per_second,
              format_duration(per_step * (total_ - step)).c_str(), flops, terminal_ ? "   " : "\n");
  std::fflush(stdout);
  line_open_ = terminal_;
}

void Progress::set_flops(double flops_per_sample, double peak_flops_per_s) {
  flops_per_sample_ = flops_per_sample;
  peak_flops_ = peak_flops_per_s;
}

double Progress::mfu(double samples_per_second) const {
  return peak_flops_ > 0 ? samples_per_second * flops_per_sample_ / peak_flops_ : 0;
}

void Progress::finish_line() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
}

MetricsCsv::MetricsCsv(std::string path, std::vector<std::string> columns)
    : path_(std::move(path)), columns_(columns.size()) {
  for (size_t i = 0; i < columns.size(); ++i) header_ += (i ? "," : "") + columns[i];
}

void MetricsCsv::add(const std::vector<double>& row) {
  LOOM_CHECK(row.size() == columns_, "MetricsCsv: a row of ", row.size(), " values for ", columns_, " columns");
  std::ostringstream line;
  for (size_t i = 0; i < row.size(); ++i) line << (i ? "," : "") << row[i];
  rows_.push_back(line.str());
}

void MetricsCsv::append(const std::vector<double>& row) {
  add(row);
  write();
}

std::string MetricsCsv::text() const {
  std::string out = header_ + "\n";
  for (const std::string& row : rows_) out += row + "\n";
  return out;
}

void MetricsCsv::restore(const std::string& text, const std::string& origin) {
  std::istringstream lines(text);
  std::string line;
  LOOM_CHECK(std::getline(lines, line) && line == header_, origin, ": the metrics have the columns '", line,
             "', expected '", header_, "'");
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    LOOM_CHECK(static_cast<size_t>(std::count(line.begin(), line.end(), ',')) + 1 == columns_, origin,
               ": a metrics row has the wrong number of values: '", line, "'");
    rows.push_back(line);
  }
  rows_ = std::move(rows);
}

void MetricsCsv::write() const {
  if (!path_.empty()) write_file_atomically(path_, text());
}

}  // namespace loom::examples
