// Settings every rank of a job must share (the learning rate, the batch
// size, the number of epochs, the pipeline schedule): each rank passes its
// own, and all of them learn at once whether they agree, before any of them
// starts work that would hang or diverge on a mismatch.
//
//   parallel::check_ranks_agree(*group, {{"--lr", "0.001"}, {"--epochs", "5"}});
//
// On a mismatch every rank throws the same loom::Error, naming each setting
// that differs and every rank's value:
//   the ranks were started with different settings: --lr (rank 0: 0.001, rank 1: 0.01)
#pragma once

#include <map>
#include <string>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

void check_ranks_agree(ProcessGroup& group, const std::map<std::string, std::string>& settings);

}  // namespace loom::parallel
