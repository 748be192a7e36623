// The median of a benchmark's timings (the upper middle for an even count):
// what the benchmarks report, since a shared machine's slow moments pull a
// mean but barely move a median.
#pragma once

#include <algorithm>
#include <vector>

namespace loom::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace loom::bench
