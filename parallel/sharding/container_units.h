// An FSDP wrap policy for models built of containers: every child of a
// Sequential or ModuleList that holds parameters is a unit (the layers of
// an MLP or CNN, the blocks of a GPT); what is left stays in the root unit.
// compare_parallel wraps its models so, and the planner predicts FSDP's
// gathered memory from the same units.
//
//   const std::set<std::string> units = parallel::container_units(*model);
//   parallel::FullyShardedDataParallel fsdp(model, group, {.wrap = parallel::wrap_named(units)});
//   parallel::largest_unit_numel(*model, units);   // what a rank holds gathered at most
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "nn/module.h"

namespace loom::parallel {

// The names of the children of every Sequential and ModuleList in `model`
// that hold parameters.
std::set<std::string> container_units(nn::Module& model);

// A wrap policy that picks the modules named in `units`.
std::function<bool(const std::string&, const nn::Module&)> wrap_named(std::set<std::string> units);

// Elements of the largest unit: a named one, or the root with the
// parameters no named unit holds.
int64_t largest_unit_numel(nn::Module& model, const std::set<std::string>& units);

}  // namespace loom::parallel
