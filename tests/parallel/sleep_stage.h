// A pipeline stage whose forward and backward each take a fixed time without
// using a core (they sleep), so stages overlap as on separate devices even on
// a machine with fewer cores than stages. Its output is its input times a
// learnable scale. Its backward is selective (autograd/node.h): `ms` for the
// input's gradient, `weight_ms` more for the scale's, so a split backward's I
// and W passes (zero-bubble schedules) take those times.
// sleep_pipeline builds an in-process pipeline of such stages on the CPU.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "autograd/node.h"
#include "nn/nn.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "parallel/pipeline/pipeline.h"
#include "tests/parallel/thread_ranks.h"

namespace loom::parallel::testing {

class SleepStageImpl : public nn::Cloneable<SleepStageImpl> {
 public:
  explicit SleepStageImpl(int ms, int weight_ms = 0) : Cloneable("SleepStage"), ms_(ms), weight_ms_(weight_ms) {
    reset();
  }
  void reset() override { scale = register_parameter("scale", ones({1})); }
  Tensor forward(const Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
    Tensor y = x.detach() * scale.detach();
    autograd::record_selective(
        "SleepStageBackward", {x, scale}, {y},
        [ms = ms_, weight_ms = weight_ms_, x = x.detach()](const TensorList& g, const autograd::InputMask& wanted) {
          TensorList grads(2);
          if (autograd::wants(wanted, 0)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
            grads[0] = g[0];
          }
          if (autograd::wants(wanted, 1)) {
            std::this_thread::sleep_for(std::chrono::milliseconds(weight_ms));
            grads[1] = sum(g[0] * x).reshape({1});
          }
          return grads;
        });
    return y;
  }
  int ms_, weight_ms_;
  Tensor scale;
};

// The loss the sleep-stage tests use: the output's sum (targets unused).
inline Tensor sum_loss(const Tensor& out, const Tensor&) { return out.sum(); }

// `stages` CPU stages of `chunks` sleeping parts each, `ms` a pass (and
// `weight_ms` for a split backward's W pass).
inline Pipeline sleep_pipeline(int stages, int micro_batches, ScheduleKind kind, int ms, int chunks = 1,
                               int weight_ms = 0) {
  std::vector<nn::ModulePtr> parts;
  for (int i = 0; i < stages * chunks; ++i) parts.push_back(std::make_shared<SleepStageImpl>(ms, weight_ms));
  return Pipeline(parts, std::vector<Device>(stages, Device::cpu()),
                  {.micro_batches = micro_batches, .schedule = kind, .chunks = chunks});
}

// Each stage held as many micro-batches at once as the ideal machine's
// simulation says (counted as the stage stores and frees them).
inline void expect_peaks_as_simulated(const PipelineStats& measured, const SimulatedStep& simulated) {
  ASSERT_EQ(measured.stages.size(), simulated.peak_in_flight.size());
  for (size_t s = 0; s < measured.stages.size(); ++s)
    EXPECT_EQ(measured.stages[s].peak_in_flight, simulated.peak_in_flight[s]) << "stage " << s;
}

// p rank threads of sleeping stages (`chunks` sleeping parts each), one
// step: each rank's stats, and the longest rank's step time if asked.
inline std::vector<StageStats> run_sleep_pipeline(int p, int m, ScheduleKind kind, int ms,
                                                  double* longest_step = nullptr, int chunks = 1, int weight_ms = 0) {
  std::vector<StageStats> stats(p);
  std::vector<double> steps(p);
  run_rank_threads(p, [&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    std::vector<nn::ModulePtr> parts;
    for (int c = 0; c < chunks; ++c) parts.push_back(std::make_shared<SleepStageImpl>(ms, weight_ms));
    DistributedPipeline pipe(parts, group, {.micro_batches = m, .schedule = kind, .chunks = chunks});
    pipe.train_step(ones({m, 2}), zeros({m}), sum_loss);
    stats[rank] = pipe.stats();
    steps[rank] = pipe.step_seconds();
  });
  if (longest_step) *longest_step = *std::max_element(steps.begin(), steps.end());
  return stats;
}

}  // namespace loom::parallel::testing
