#include "tensor/precision.h"

#include <atomic>

namespace loom {
namespace {

// Deliberately process-wide (STYLE.md allows global state when it is the
// point): it mirrors a PyTorch flag that users set once at start-up.
std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace

void set_allow_tf32(bool allow) { tf32_flag().store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return tf32_flag().load(std::memory_order_relaxed); }

}  // namespace loom
