#include "parallel/sharding/memory_model.h"

#include "tensor/error.h"

namespace loom::parallel {

ModelBytes modeled_bytes(const std::string& strategy, const ModelShape& s) {
  LOOM_CHECK(s.ranks >= 1, "modeled_bytes: ranks must be at least 1, got ", s.ranks);
  const int64_t whole = s.numel * s.element_size;  // one full copy
  const int64_t shard = whole / s.ranks;           // one rank's piece of it
  const int64_t state = s.state_tensors;
  if (strategy == "ddp") return {whole, whole, state * whole};
  if (strategy == "zero1") return {whole, whole, state * shard};
  if (strategy == "zero2") return {whole, shard, state * shard};
  if (strategy == "fsdp") {
    const int64_t unit = s.unit_numel * s.element_size;
    return {shard + unit, shard + unit, state * shard};
  }
  LOOM_FAIL("modeled_bytes: unknown strategy '", strategy, "' (ddp, zero1, zero2 or fsdp)");
}

}  // namespace loom::parallel
