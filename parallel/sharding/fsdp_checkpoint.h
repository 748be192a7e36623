// Checkpoints of an FSDP model and its optimizer, in two forms.
//
// Full: every parameter whole, by its name in the unwrapped model, and the
// optimizer's state the same way ("state.<parameter name>.<exp_avg|...>").
// Gathered on every rank (a collective); rank 0 writes it. A single-device
// model loads the model part as it is (model->load_state_dict), and any
// world size resumes from it: each rank takes its own pieces.
//
//   nn::StateDict model_state = fsdp->full_state_dict();
//   nn::StateDict opt_state = full_optimizer_state_dict(*fsdp, opt);
//   if (rank == 0) nn::save_safetensors("full.safetensors", concat(model_state, opt_state));
//
// Sharded: each rank writes only what it holds, `<dir>/shard-<r>-of-<N>.safetensors`
// (its shards and its optimizer's state for them), and rank 0 writes
// `<dir>/index.json` (the world size and each unit's name and size). No
// gathering, no single rank holding everything; loading needs the same world
// size and the same model, and says which file or unit does not match.
//
//   save_sharded(dir, *fsdp, opt);   // every rank
//   load_sharded(dir, *fsdp, opt);   // every rank, same N
#pragma once

#include <string>

#include "nn/module.h"
#include "optim/optimizer.h"
#include "parallel/sharding/fsdp.h"

namespace loom::parallel {

// `opt` must step fsdp.parameters() (the shards), in that order.
nn::StateDict full_optimizer_state_dict(FullyShardedDataParallelImpl& fsdp, const optim::Optimizer& opt);
void load_full_optimizer_state_dict(FullyShardedDataParallelImpl& fsdp, optim::Optimizer& opt,
                                    const nn::StateDict& state);

void save_sharded(const std::string& dir, FullyShardedDataParallelImpl& fsdp, const optim::Optimizer& opt);
void load_sharded(const std::string& dir, FullyShardedDataParallelImpl& fsdp, optim::Optimizer& opt);

}  // namespace loom::parallel
