// What the resume fuzzer restores checkpoints into, shared with its corpus
// test (tests/examples/resume_fuzz_test.cc), which also writes the valid seeds.
// A small model keeps corpus files near a kilobyte; the path is the same.
#pragma once

#include <optional>
#include <string>

#include "examples/common/run_record.h"
#include "nn/nn.h"
#include "optim/optimizer.h"

namespace loom::examples::fuzz {

struct ResumeTarget {
  nn::Sequential model{nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2)};
  optim::AdamW optimizer{model->parameters(), {.lr = 2e-3, .weight_decay = 1e-4}};

  // The run the checkpoints belong to (no CSV: resume must not write files).
  static RunRecord::Options options(const std::string& checkpoint) {
    return {.checkpoint = checkpoint, .metrics = "", .columns = {"epoch", "step", "loss"},
            .settings = {{"--lr", "0.002"}, {"--epochs", "3"}},
            .writer = {.program = "resume_fuzz", .layout = "one device"}};
  }
};

// The same file with loom's checksums recomputed over whatever it now holds
// (nullopt when its header is not even a JSON object), so that mutations
// also reach the checks behind the checksums: metadata, settings, metrics
// rows, optimizer state, model shapes.
std::optional<std::string> resealed(const std::string& file);

}  // namespace loom::examples::fuzz
