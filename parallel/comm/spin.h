// spin_briefly: poll a condition for a few microseconds before blocking on it.
//
// A thread that sleeps on a condition variable is woken through the kernel:
// a futex call and a context switch, tens of microseconds on a virtual
// machine. The ranks of an in-process group usually reach a collective
// within microseconds of each other, so a short poll first turns most of
// those wake-ups into a few loads of a shared counter. The budget is small
// and fixed, so a peer that is far behind costs one poll and then the
// ordinary sleep: the spin never replaces blocking.
#pragma once

#include <chrono>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace loom::parallel {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// True as soon as ready() is; false once `budget` has passed without it.
template <typename Ready>
bool spin_briefly(Ready&& ready, std::chrono::microseconds budget = std::chrono::microseconds(50)) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until) return false;
    cpu_relax();
  }
}

}  // namespace loom::parallel
