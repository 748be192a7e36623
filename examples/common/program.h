// The frame every example's main() runs in, so that no input ends in a
// crash or a hang:
//
//   int main(int argc, char** argv) {
//     return examples::run_program("fashion_mnist_cnn", [&] {
//       Flags flags("...");  ...  flags.parse(argc, argv);
//       ...
//       return 0;
//     });
//   }
//
// - stdout is line-buffered even when redirected, so a killed run keeps every
//   line it finished;
// - every exception ends the program with one line on stderr, "<name>: <what>"
//   ("<name> (rank N): ..." under mpirun), and a non-zero status: 2 for a bad
//   command line, 1 for anything else (a loom::Error, running out of memory,
//   any other exception); "try a smaller --batch-size or model" only where
//   tensor memory ran out (loom::OutOfMemoryError), never for a bad file;
// - a body that returns kExitPreempted (a run stopped by a signal after its
//   checkpoint, examples/common/preemption.h) is not a failure: the status
//   goes out as it is, and every rank of the job returns it;
// - on failure, `on_failure(why)` runs last: distributed programs pass
//   parallel::abandon_job, so one failing rank ends the whole job at once
//   instead of the others waiting out their timeouts.
#pragma once

#include <functional>
#include <string>

namespace loom::examples {

// The exit status of a run that stopped on a signal after committing its
// checkpoint: EX_TEMPFAIL (sysexits.h), "try again later". Not 143 (128 +
// SIGTERM), which says the signal killed the process, checkpoint or not: a
// job script requeues on 75 and treats anything else non-zero as a failure.
constexpr int kExitPreempted = 75;

int run_program(const std::string& name, const std::function<int()>& body,
                const std::function<void(const std::string& why)>& on_failure = {});

}  // namespace loom::examples
