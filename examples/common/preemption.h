// Stopping a training run cleanly when its machine is about to be taken
// away: a scheduler's SIGTERM (scancel, a preempting job, Kubernetes), or
// Slurm's early warning (`sbatch --signal=USR1@120`: SIGUSR1 two minutes
// before the time limit). The run finishes its step, commits a checkpoint,
// and exits with kExitPreempted; started again with --resume it ends exactly
// where an uninterrupted run would.
//
//   install_stop_handlers();                          // SIGTERM, SIGUSR1: set a flag, nothing else
//   StopAgreement stop(group, device, /*every=*/1);   // group null: this process decides alone
//   for (int64_t step = 1; ...; ++step) {
//     ... forward, backward, optimizer step ...
//     if (stop.stop_after(step)) { commit the checkpoint; return kExitPreempted; }
//   }
//
// The handlers only store the signal's number in a lock-free atomic
// (async-signal-safe); the loop reads it at step boundaries. Over ranks,
// StopAgreement makes every rank stop after the same step, whichever ranks
// were signalled: every `every` steps the ranks start an all_reduce (Max) of
// their flags, and read it at the next check. Every rank starts and reads the
// same collectives at the same steps, so all read the same value and stop
// together, one check after the first signal. The collective runs on the
// group's thread while the next steps compute; on the CPU (threads, MPI) its
// result is there when read, and `every` = 1 costs no wait. On a GPU the read
// waits for the device, so the caller passes an `every` at which it reads the
// device anyway (the examples: the progress line's loss). docs/architecture.md,
// "Programs: errors, never crashes or hangs", says why 75 and why here.
//
// A second signal changes nothing (the stop is under way, and Slurm's
// SIGTERM after its USR1 warning must not cut the checkpoint short); SIGINT
// (Ctrl-C) and SIGKILL still end the process at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "examples/common/program.h"  // kExitPreempted
#include "parallel/comm/process_group.h"

namespace loom::examples {

// Installs the handlers for SIGTERM and SIGUSR1, once per process (later
// calls do nothing). A process-wide setting, as signal dispositions are.
void install_stop_handlers();

// The first stop signal this process received (SIGTERM or SIGUSR1), or 0.
int stop_signal();
// "SIGTERM", "SIGUSR1".
std::string signal_name(int signal);

// For tests: as if `signal` had arrived (0 clears the flag).
void set_stop_signal_for_testing(int signal);

class StopAgreement {
 public:
  // `group` null or of one rank: stop_after() answers from this process's
  // flag, at once. Otherwise the flag travels as a tensor on `device` (the
  // group's), checked every `every` steps. `requested` says whether this
  // rank was asked to stop: by default whether a stop signal arrived (tests
  // of rank threads, which share the process's flag, give each its own).
  StopAgreement(std::shared_ptr<parallel::ProcessGroup> group, Device device, int64_t every,
                std::function<bool()> requested = [] { return stop_signal() != 0; });
  ~StopAgreement();  // waits for a check in flight: every rank started it
  StopAgreement(const StopAgreement&) = delete;
  StopAgreement& operator=(const StopAgreement&) = delete;

  // After step `step` (1-based), on every rank: true when the run stops here.
  // Over ranks it is true on all of them at the same step, one check after
  // the first rank saw a signal.
  bool stop_after(int64_t step);

 private:
  std::shared_ptr<parallel::ProcessGroup> group_;
  int64_t every_;
  std::function<bool()> requested_;
  Tensor flag_;                  // [1] float32 on the group's device: 1 once any rank saw a signal
  parallel::WorkPtr in_flight_;  // the last check's all_reduce
};

}  // namespace loom::examples
