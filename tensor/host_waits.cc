#include "tensor/host_waits.h"

#include <atomic>

namespace loom {
namespace {

std::atomic<int64_t> waits{0};

}  // namespace

int64_t host_waits() { return waits.load(std::memory_order_relaxed); }

void note_host_wait() { waits.fetch_add(1, std::memory_order_relaxed); }

}  // namespace loom
