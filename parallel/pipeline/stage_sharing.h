// What the ranks of a pipeline share so that they agree: the trained
// stages' weights and optimizer state after training over ranks, and the
// cuts and pass times a schedule is built from. Every rank calls each.
#pragma once

#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"
#include "parallel/comm/process_group.h"
#include "parallel/pipeline/schedule.h"

namespace loom::parallel {

// After training over ranks, each rank's copy of the model holds up-to-date
// weights for its own stage only. This broadcasts every part's parameters and
// buffers from the rank that trains it (part i: rank i % p, or as
// `placement` places it), so that every rank holds the whole trained model
// (to evaluate it or save it). `parts` is the whole model's split (p parts,
// or p * v with chunks), the same on every rank; every rank calls it.
void share_stage_weights(const std::vector<nn::ModulePtr>& parts, ProcessGroup& group,
                         Placement placement = Placement::Loop);

// Makes every rank's `boundaries` rank 0's: cuts chosen from timings
// (balance_by_time) differ between ranks, and every rank must cut the model
// alike. `device` is the one the group's tensors live on (an NCCL group's
// GPU); every rank calls it.
void share_boundaries(std::vector<int>& boundaries, ProcessGroup& group, Device device = Device::cpu());
// The same for measured pass times (PipelineOptions::part_times): every rank
// must build the same schedule.
void share_part_times(std::vector<PassTimes>& part_times, ProcessGroup& group, Device device = Device::cpu());

// Over ranks, each rank's optimizer steps only its own stage's parameters
// (the others get no gradient there), so its state holds theirs alone. This
// broadcasts every parameter's step count and state from the rank that
// trains it, as share_stage_weights does the weights: then the one file the
// reporting rank commits holds the whole optimizer, and every rank resumes
// from it exactly. One file, not one per stage: its rename is the epoch's
// one commit, so a kill between the ranks' writes cannot leave stages at
// different epochs. Every rank calls it.
void share_stage_optimizer_state(const std::vector<nn::ModulePtr>& parts, optim::Optimizer& optimizer,
                                 ProcessGroup& group, Placement placement = Placement::Loop);

}  // namespace loom::parallel
