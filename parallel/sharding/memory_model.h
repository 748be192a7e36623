// What each data-parallel strategy keeps per rank, by the ZeRO paper's
// accounting: parameters, gradients and optimizer state, for Ψ parameters of
// `element_size` bytes and an optimizer with `state_tensors` tensors per
// parameter (Adam: 2, SGD with momentum: 1). With float32 and Adam:
//
//   ddp    16Ψ              every rank holds everything
//   zero1  8Ψ + 8Ψ/N        the optimizer state is sharded
//   zero2  4Ψ + 12Ψ/N       the gradients too
//   fsdp   16Ψ/N + unit     the parameters too; one unit is gathered at a time
//
// Activations come on top. compare_parallel prints these beside what the
// allocator measured, and the sharding tests hold the two within 10%.
#pragma once

#include <cstdint>
#include <string>

namespace loom::parallel {

struct ModelBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t total() const { return parameters + gradients + optimizer_state; }
};

struct ModelShape {
  int64_t numel = 0;         // Ψ: elements of all the parameters
  int64_t element_size = 4;  // bytes per element
  int state_tensors = 2;     // Adam's exp_avg and exp_avg_sq
  int ranks = 1;             // N
  int64_t unit_numel = 0;    // fsdp: elements of the largest unit, gathered with its gradient
};

// The strategy is one of "ddp", "zero1", "zero2", "fsdp"; anything else throws.
ModelBytes modeled_bytes(const std::string& strategy, const ModelShape& shape);

}  // namespace loom::parallel
