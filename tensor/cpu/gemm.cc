// Which GEMM build tensor/cpu/gemm.h runs. This file is built for AVX2 like
// the rest of loom: asking whether AVX-512 is there must not need it.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "tensor/cpu/gemm_avx512.h"

namespace loom::cpu {
namespace {

// LOOM_CPU_GEMM=avx2 in the environment keeps the AVX2 build (to compare, or
// to rule the AVX-512 one out).
std::atomic<bool> g_avx512_allowed{[] {
  const char* choice = std::getenv("LOOM_CPU_GEMM");
  return choice == nullptr || std::strcmp(choice, "avx2") != 0;
}()};

}  // namespace

bool avx512_gemm_enabled() {
  // x86-64-v4's AVX-512 subsets; libgcc also checks that the OS saves the AVX-512 registers.
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                                __builtin_cpu_supports("avx512cd");
  return supported && g_avx512_allowed.load(std::memory_order_relaxed);
}

void set_avx512_gemm(bool allowed) { g_avx512_allowed.store(allowed); }

}  // namespace loom::cpu
