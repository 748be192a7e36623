#include "tensor/host_waits.h"

#include <atomic>
#include <utility>

#include "tensor/error.h"

namespace loom {
namespace {

std::atomic<int64_t> waits{0};

// What this thread is doing that forbids host waits; null when nothing is.
thread_local const std::string* t_forbidden_during = nullptr;

}  // namespace

int64_t host_waits() { return waits.load(std::memory_order_relaxed); }

void note_host_wait(const char* what) {
  LOOM_CHECK(t_forbidden_during == nullptr, what, " makes the host wait for the device, which cannot happen while ",
             *t_forbidden_during, ": the captured work has not run yet. Read values after replay(), outside the "
             "captured function");
  count_host_wait();
}

void count_host_wait() noexcept { waits.fetch_add(1, std::memory_order_relaxed); }

HostWaitsForbidden::HostWaitsForbidden(std::string during)
    : previous_(t_forbidden_during), during_(std::move(during)) {
  t_forbidden_during = &during_;
}

HostWaitsForbidden::~HostWaitsForbidden() { t_forbidden_during = previous_; }

}  // namespace loom
