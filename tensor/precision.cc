#include "tensor/precision.h"

#include "tensor/cudnn_benchmark.h"

#include <atomic>

namespace loom {
namespace {

// Deliberately process-wide (docs/style.md, "State": global state only where
// it is the point): it mirrors a PyTorch flag that users set once at start-up.
std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::atomic<bool>& cudnn_benchmark_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace

void set_allow_tf32(bool allow) { tf32_flag().store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_flag().load(std::memory_order_relaxed); }

// tensor/cudnn_benchmark.h: another switch users set once, kept beside TF32's.
void set_cudnn_benchmark(bool benchmark) { cudnn_benchmark_flag().store(benchmark, std::memory_order_relaxed); }
bool cudnn_benchmark() { return cudnn_benchmark_flag().load(std::memory_order_relaxed); }

}  // namespace loom
