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
// - on failure, `on_failure(why)` runs last: distributed programs pass
//   parallel::abandon_job, so one failing rank ends the whole job at once
//   instead of the others waiting out their timeouts.
#pragma once

#include <functional>
#include <string>

namespace loom::examples {

int run_program(const std::string& name, const std::function<int()>& body,
                const std::function<void(const std::string& why)>& on_failure = {});

}  // namespace loom::examples
