#include "examples/common/progress.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "tensor/error.h"

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
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = step > first_step_ ? elapsed / (step - first_step_) : 0;
  std::printf("%sstep %lld/%lld  loss %.4f  %.0f samples/s  ETA %s%s", terminal_ ? "\r" : "",
              static_cast<long long>(step), static_cast<long long>(total_), loss, samples_per_second,
              format_duration(per_step * (total_ - step)).c_str(), terminal_ ? "   " : "\n");
  std::fflush(stdout);
  line_open_ = terminal_;
}

void Progress::finish_line() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
}

MetricsCsv::MetricsCsv(std::string path, std::vector<std::string> columns)
    : path_(std::move(path)), columns_(std::move(columns)) {}

void MetricsCsv::load_existing(double up_to_epoch) {
  std::ifstream in(path_);
  std::string line;
  if (!std::getline(in, line)) return;  // no earlier file, or empty
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) row.push_back(std::stod(cell));
    if (row.size() == columns_.size() && row[0] <= up_to_epoch) rows_.push_back(row);
  }
}

void MetricsCsv::append(const std::vector<double>& row) {
  LOOM_CHECK(row.size() == columns_.size(), "MetricsCsv: a row of ", row.size(), " values for ", columns_.size(),
             " columns");
  rows_.push_back(row);
  write();
}

void MetricsCsv::write() const {
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp);
    for (size_t i = 0; i < columns_.size(); ++i) out << (i ? "," : "") << columns_[i];
    out << '\n';
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size(); ++i) out << (i ? "," : "") << row[i];
      out << '\n';
    }
    LOOM_CHECK(out.good(), "MetricsCsv: could not write ", tmp);
  }
  LOOM_CHECK(std::rename(tmp.c_str(), path_.c_str()) == 0, "MetricsCsv: could not rename ", tmp, " to ", path_);
}

}  // namespace loom::examples
