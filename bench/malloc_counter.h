// Counts the process's calls to the C allocator (malloc, calloc, realloc,
// aligned_alloc, posix_memalign, memalign), from every library, by replacing
// those functions in the benchmark binary (glibc allows this) and forwarding
// to glibc's own. Link //bench:malloc_counter into a binary to use it.
//
//   const int64_t before = bench::malloc_calls();
//   train_step();
//   std::printf("%lld\n", bench::malloc_calls() - before);
#pragma once

#include <cstdint>

namespace loom::bench {

// Allocation calls since the process started.
int64_t malloc_calls();

}  // namespace loom::bench
