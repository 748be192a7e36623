// The start-up every program that runs one rank per process repeats (under
// mpirun or srun, or as a single rank without them):
//
//   int main(int argc, char** argv) {
//     return run_program("ddp_fashion_mnist", [&] {
//       auto world = parallel::init(argc, argv);   // before the flags: MPI may take its own arguments
//       Flags flags(...);  ...  flags.parse(argc, argv);
//       Rank me = join_job(world, flags, config.device);
//       ... me.group moves me.device's tensors ...
//     }, parallel::abandon_job);
//   }
//
// join_job, in this order: SIGUSR2 makes the rank write its flight record
// (parallel/comm/flight_recorder.h: which rank hangs); the ranks check that
// they were started with the same Run and Job settings (and devices of one
// kind), before anything else that could hang or diverge; the device spec
// becomes this rank's device
// ("cuda": its local GPU, cuda:<local rank>; a note when ranks share one); and
// the group that moves that device's tensors is chosen (parallel::for_device:
// NCCL, host staging, or the world group itself).
#pragma once

#include <memory>
#include <string>

#include "data/char_corpus.h"
#include "examples/common/flags.h"
#include "parallel/comm/process_group.h"

namespace loom::examples {

struct Rank {
  std::shared_ptr<parallel::ProcessGroup> group;
  Device device;
};

Rank join_job(std::shared_ptr<parallel::ProcessGroup> world, const Flags& flags, const std::string& device_spec);

// The ranks check that they read the same text: its vocabulary and its
// characters, by size and fingerprint. The flags that name the text (its
// folder, a Rank setting) may differ between ranks; what they read may not,
// or tensor-parallel ranks would train on different data and exit 0. A
// mismatch is every rank's error, naming the vocabulary or the text and
// each rank's value.
void check_ranks_read_the_same_text(parallel::ProcessGroup& world, const data::CharCorpus& corpus,
                                    const std::string& source_flag);

}  // namespace loom::examples
