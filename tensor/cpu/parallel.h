// parallel_for: splits [0, n) into chunks run on OpenMP threads.
//
// Work under `grain` elements runs inline on the calling thread, so small ops
// pay no threading cost; DataParallel's replica threads each get their own team.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace loom::cpu {

inline constexpr int64_t kParallelGrain = 32768;

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  int64_t chunks = std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1));
  if (chunks <= 1) {
    if (n > 0) fn(int64_t{0}, n);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    try {
      fn(begin, end);
    } catch (...) {
#pragma omp critical(loom_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace loom::cpu
