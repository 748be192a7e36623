// Where to cut a Sequential so that its pipeline stages take about equal
// time (torchgpipe's balance_by_time). A pipeline runs at the pace of its
// slowest stage, so cutting by layer count wastes the others' time when
// layers differ in cost (a convolution against a ReLU).
//
//   std::vector<int> cuts = parallel::balance_by_time(model, sample_batch, /*parts=*/4);
//   parallel::Pipeline pipe(parallel::split_sequential(model, cuts), devices, options);
#pragma once

#include <vector>

#include "nn/layers/container.h"
#include "parallel/pipeline/schedule.h"

namespace loom::parallel {

// Cuts `costs` into `parts` contiguous runs of at least one element each so
// that the largest run's sum is as small as it can be; returns where the
// runs after the first begin (split_sequential's boundaries). Ties go to the
// cuts that come earliest.
std::vector<int> balanced_boundaries(const std::vector<double>& costs, int parts);

// What each child of a Sequential costs on a sample batch, in order.
struct ChildCosts {
  // Medians of the repeats. The backward is split as a zero-bubble stage
  // splits it (autograd/split_backward.h): the input's gradient (I), then
  // the weights' (W); backward_seconds is the two together.
  std::vector<double> forward_seconds, backward_seconds, backward_input_seconds, backward_weight_seconds;
  std::vector<int64_t> output_bytes;
  std::vector<double> seconds() const;  // forward + backward
};

// Each child timed on `sample` (its forward, then its backward from a
// gradient of ones, in two halves), `repeats` times; on a copy of the
// model, so its parameters, gradients, buffers and the random numbers later
// drawn are left as they were.
ChildCosts time_children(const nn::Sequential& model, const Tensor& sample, int repeats = 3);

// Each part's pass times when the children are cut at `boundaries`
// (split_sequential's): its children's F, I and W added up, on the sample
// batch (a schedule depends only on their ratios). Feeds the list-scheduled
// zero-bubble schedules (ZB-H2, ZB-V) through PipelineOptions::part_times.
std::vector<PassTimes> part_pass_times(const ChildCosts& costs, const std::vector<int>& boundaries);

// balanced_boundaries of time_children: `parts` stages of about equal time.
std::vector<int> balance_by_time(const nn::Sequential& model, const Tensor& sample, int parts, int repeats = 3);

}  // namespace loom::parallel
