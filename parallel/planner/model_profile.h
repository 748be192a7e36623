// What the planner knows of a model, measured once on one device at a small
// batch: its parameters, a training step's memory above the model's state as
// a line in the batch size (the allocator's peak at two batch sizes), its
// FLOPs (counted, tensor/flop_counter.h), and for a Sequential the same per
// child, where a pipeline can cut it.
//
//   parallel::ModelProfile p = parallel::profile_model(*model, {x, y, loss});
//   p.step_bytes.at(256);      // activations and temporaries of a step on 256 samples
//   p.flops_per_sample;        // forward and backward
//
// The step measured is a training step as loom's strategies run it: forward,
// zero_grad, backward, the optimizer's step, with the gradients and the
// optimizer state of the step before still held (steady state). It runs on a
// clone of the model, so the model given is not changed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/module.h"
#include "tensor/memory_budget.h"

namespace loom::parallel {

// A batch to measure with, and the loss of the model's output against it.
struct SampleBatch {
  Tensor input;   // dim 0: the samples
  Tensor target;  // dim 0: the samples; may be undefined when `loss` needs none
  // Default: cross-entropy for integer targets (the output's last dim the
  // classes), mean squared error for floating ones, the output's sum without.
  std::function<Tensor(const Tensor& output, const Tensor& target)> loss{};
};

struct ModelProfile {
  // One child of a Sequential (a place a pipeline may cut after), or the
  // whole model when it is not a Sequential.
  struct Part {
    std::string name;
    int64_t parameters = 0;                // elements
    double kept_bytes_per_sample = 0;      // what its forward adds to what is held for backward (may be < 0)
    double output_bytes_per_sample = 0;    // its output: the message a pipeline cut sends
    double forward_flops_per_sample = 0;
    double seconds = 0;                    // forward and backward on the sample, timed (a Sequential's children)
    double input_freed_bytes_per_sample = 0;  // of its input, what nothing else holds once the caller lets go
    StepMemory backward_bytes;             // its backward's peak above what its forward holds, gradients in and out
                                           // (a Sequential's children: a pipeline's parts)
  };
  int64_t parameters = 0;          // elements of all parameters
  int64_t element_size = 4;        // bytes per parameter element (float32 master weights)
  int optimizer_state_tensors = 2; // per parameter: AdamW 2, SGD with momentum 1, SGD 0
  int64_t state_bytes = 0;         // measured: parameters, gradients and optimizer state held between steps
  StepMemory step_bytes;           // a step's peak above state_bytes: activations and temporaries
  double flops_per_sample = 0;     // forward and backward, counted
  double forward_flops_per_sample = 0;
  double step_seconds_per_sample = 0;  // measured at the larger batch (the CPU's efficiency comes from it)
  std::vector<Part> parts;
  int64_t largest_part = 0;        // elements of FSDP's largest unit (parallel/sharding/container_units.h)
  // Transformers (nn::CausalSelfAttention inside): what tensor, sequence
  // and context parallelism cut.
  int attention_layers = 0;
  int64_t embed_dim = 0, heads = 0, tokens_per_sample = 0;
  int64_t shardable_parameters = 0;  // in Linear and Embedding modules: tensor parallelism splits them
};

struct ProfileOptions {
  std::string optimizer = "adamw";  // adamw, sgd, sgd-momentum
};

// Measures `model` (a clone of it) on `sample` at two batch sizes up to the
// sample's. Throws loom::Error for an empty sample or a model without
// parameters.
ModelProfile profile_model(const nn::Module& model, const SampleBatch& sample, const ProfileOptions& options = {});

}  // namespace loom::parallel
