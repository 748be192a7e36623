// Wall-clock seconds, for progress lines, statistics and benchmarks: the one
// place loom turns the steady clock into seconds.
//
//   Stopwatch watch;
//   ... work ...
//   double s = watch.seconds();   // since construction (or the last restart())
#pragma once

#include <chrono>

namespace loom {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class Stopwatch {
 public:
  double seconds() const { return seconds_since(start_); }
  void restart() { start_ = std::chrono::steady_clock::now(); }
  std::chrono::steady_clock::time_point started() const { return start_; }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace loom
