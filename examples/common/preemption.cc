#include "examples/common/preemption.h"

#include <atomic>
#include <csignal>
#include <mutex>

#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::examples {
namespace {

// The first stop signal's number, 0 before one. Written by the handler, on
// whichever thread the kernel picks: a lock-free atomic is all a handler may
// touch.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler may only use a lock-free atomic");

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signal);  // the first one names the stop
}

}  // namespace

void install_stop_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // reads and writes in flight go on: the step finishes as it would
    for (int signal : {SIGTERM, SIGUSR1})
      LOOM_CHECK(sigaction(signal, &action, nullptr) == 0, "cannot install the handler for ", signal_name(signal));
  });
}

int stop_signal() { return g_stop_signal.load(); }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "signal " + std::to_string(signal);
  }
}

void set_stop_signal_for_testing(int signal) { g_stop_signal.store(signal); }

StopAgreement::StopAgreement(std::shared_ptr<parallel::ProcessGroup> group, Device device, int64_t every,
                             std::function<bool()> requested)
    : group_(std::move(group)), every_(every), requested_(std::move(requested)) {
  LOOM_CHECK(every >= 1, "StopAgreement: checks every ", every, " steps; expected at least 1");
  if (group_ && group_->size() > 1) flag_ = zeros({1}, {.device = device});
}

// Not waiting here: a rank that unwinds from an error must reach
// abandon_job at once, not wait for peers that may be gone. The collective
// keeps its tensor alive, and on a clean finish later collectives (the
// epoch's end) were waited for, which the group finishes in order after it.
StopAgreement::~StopAgreement() = default;

bool StopAgreement::stop_after(int64_t step) {
  if (!flag_.defined()) return requested_();
  if (step % every_ != 0) return false;
  if (in_flight_) {
    in_flight_->wait();  // started a check ago: on the CPU long done
    in_flight_.reset();
    if (flag_.item() > 0) return true;  // every rank read this same value
  }
  flag_.fill_(requested_() ? 1 : 0);
  in_flight_ = group_->all_reduce(flag_, parallel::ReduceOp::Max);
  return false;
}

}  // namespace loom::examples
