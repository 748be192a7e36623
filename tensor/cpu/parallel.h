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

// The grain, in items, for items of `item_size` elements each (rows of a
// matrix, say): about kParallelGrain elements a chunk, and at least one item.
inline int64_t items_per_grain(int64_t item_size) {
  return std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(item_size, 1));
}

// How many chunks parallel_for splits [0, n) into: at most one per thread,
// each of at least `grain` elements.
inline int64_t parallel_chunks(int64_t n, int64_t grain) {
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  return std::max<int64_t>(1, std::min<int64_t>(threads, (n + grain - 1) / std::max<int64_t>(grain, 1)));
}

// Runs fn(chunk, begin, end) for chunk = 0 .. parallel_chunks(n, grain) - 1,
// in parallel. The split depends only on n, grain and the thread count, so
// kernels that keep per-chunk partial results and add them in chunk order
// are deterministic.
template <typename F>
void parallel_for_chunks(int64_t n, int64_t grain, F&& fn) {
  const int64_t chunks = parallel_chunks(n, grain);
  if (chunks <= 1) {
    if (n > 0) fn(int64_t{0}, int64_t{0}, n);
    return;
  }
  std::exception_ptr error;
#pragma omp parallel for num_threads(chunks) schedule(static, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    try {
      fn(c, n * c / chunks, n * (c + 1) / chunks);
    } catch (...) {
#pragma omp critical(loom_parallel_for_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  parallel_for_chunks(n, grain, [&](int64_t, int64_t begin, int64_t end) { fn(begin, end); });
}

}  // namespace loom::cpu
