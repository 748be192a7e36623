// ZB-V built by list scheduling: the ideal machine of simulator.h is run
// forward in time, and each time a stage is free it picks its next pass by
// the rule in schedule.h. The order each stage ran its passes in is the
// schedule; simulate_schedule of it replays the same step.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "parallel/pipeline/schedule.h"
#include "tensor/error.h"

namespace loom::parallel {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

// The machine while the schedule is built: when each (part, micro-batch)'s
// forward and input gradient end, and what each stage has left to do.
class VScheduleBuilder {
 public:
  VScheduleBuilder(int stages, int micro_batches, std::vector<PassTimes> part_times)
      : p_(stages), m_(micro_batches), times_(std::move(part_times)),
        forward_end_(2 * p_, std::vector<double>(m_, kNever)),
        gradient_end_(forward_end_), stages_(p_), schedule_(p_) {}

  PipelineSchedule build() {
    const size_t total = static_cast<size_t>(6 * p_ * m_);  // F, I, W of 2p parts x m micro-batches
    size_t placed = 0;
    while (placed < total) {
      // The stage that is free first decides first; one that found nothing
      // to do at its time lets the others at that time go before it again.
      int s = 0;
      for (int t = 1; t < p_; ++t)
        if (std::pair{stages_[t].free_at, stages_[t].deferred} < std::pair{stages_[s].free_at, stages_[s].deferred})
          s = t;
      Stage& stage = stages_[s];
      LOOM_CHECK(stage.free_at < kNever, "zero_bubble_v_schedule: no stage can go on (", placed, " of ", total,
                 " passes placed)");
      if (place_next_pass(s)) {
        ++placed;
        stage.deferred = 0;
        continue;
      }
      // Nothing is ready: wait for the next pass (of any stage) to end. Every
      // other stage is busy until one of these ends or free at this time.
      const auto next_end = ends_.upper_bound(stage.free_at);
      if (next_end != ends_.end()) {
        stage.free_at = *next_end;
        stage.deferred = 0;
      } else if (++stage.deferred > p_) {
        stage.free_at = kNever;  // every stage at this time is waiting: nothing more will end
      }
    }
    return schedule_;
  }

 private:
  struct Stage {
    double free_at = 0;
    int deferred = 0;             // times it found nothing to do at free_at
    int next_forward[2] = {0, 0};  // per chunk
    std::vector<int> awaiting_input[2], awaiting_weight[2];  // micro-batches, oldest first
    int held = 0;                 // chunk activations, F to W
  };

  int part(int s, int chunk) const { return part_at({s, chunk}, p_, Placement::V); }
  static void forget(std::vector<int>& micro_batches, int mb) {
    micro_batches.erase(std::find(micro_batches.begin(), micro_batches.end(), mb));
  }
  bool ended_by(const std::vector<std::vector<double>>& ends, int part, int mb, double t) const {
    return ends[part][mb] <= t;
  }

  // Runs stage s's next pass at its free time if one is ready: the oldest
  // ready I, else the oldest ready F the memory allows, else the oldest W
  // (ties to the earlier part).
  bool place_next_pass(int s) {
    Stage& stage = stages_[s];
    const double t = stage.free_at;
    struct Choice {
      Pass pass;
      int chunk = -1, mb = 0;
    } best{Pass::Forward};
    auto consider = [&](Pass pass, int chunk, int mb) {
      if (best.chunk < 0 || mb < best.mb || (mb == best.mb && part(s, chunk) < part(s, best.chunk)))
        best = {pass, chunk, mb};
    };
    for (int c = 0; c < 2; ++c)
      for (int mb : stage.awaiting_input[c]) {
        const int q = part(s, c);
        if (ended_by(forward_end_, q, mb, t) && (q == 2 * p_ - 1 || ended_by(gradient_end_, q + 1, mb, t)))
          consider(Pass::BackwardInput, c, mb);
      }
    if (best.chunk < 0)
      for (int c = 0; c < 2; ++c) {
        const int mb = stage.next_forward[c], q = part(s, c);
        if (mb < m_ && stage.held < 2 * p_ - (c == 0 ? 1 : 0) && (q == 0 || ended_by(forward_end_, q - 1, mb, t)))
          consider(Pass::Forward, c, mb);
      }
    if (best.chunk < 0)
      for (int c = 0; c < 2; ++c)
        for (int mb : stage.awaiting_weight[c]) consider(Pass::BackwardWeight, c, mb);
    if (best.chunk < 0) return false;

    const int c = best.chunk, mb = best.mb, q = part(s, c);
    const PassTimes& times = times_[q];
    double cost = 0;
    switch (best.pass) {
      case Pass::Forward:
        cost = times.forward;
        forward_end_[q][mb] = t + cost;
        ++stage.next_forward[c];
        stage.awaiting_input[c].push_back(mb);
        ++stage.held;
        break;
      case Pass::BackwardInput:
        cost = times.backward_input;
        gradient_end_[q][mb] = t + cost;
        forget(stage.awaiting_input[c], mb);
        stage.awaiting_weight[c].push_back(mb);
        break;
      default:
        cost = times.backward_weight;
        forget(stage.awaiting_weight[c], mb);
        --stage.held;
        break;
    }
    stage.free_at = t + cost;
    ends_.insert(stage.free_at);  // a W readies nothing elsewhere, but others may wait until it ends
    schedule_[s].push_back({best.pass, mb, c});
    return true;
  }

  const int p_, m_;
  const std::vector<PassTimes> times_;  // [part]
  std::vector<std::vector<double>> forward_end_, gradient_end_;  // [part][micro-batch]
  std::vector<Stage> stages_;
  std::set<double> ends_;  // when the passes placed so far end
  PipelineSchedule schedule_;
};

}  // namespace

PipelineSchedule zero_bubble_v_schedule(int stages, int micro_batches, PassTimes times) {
  LOOM_CHECK(stages >= 1, "zero_bubble_v_schedule: need at least one stage, got ", stages);
  return zero_bubble_v_schedule(stages, micro_batches, std::vector<PassTimes>(2 * stages, times));
}

PipelineSchedule zero_bubble_v_schedule(int stages, int micro_batches, const std::vector<PassTimes>& part_times) {
  LOOM_CHECK(stages >= 1 && micro_batches >= 1, "zero_bubble_v_schedule: need at least one stage and one micro-batch, got ",
             stages, " and ", micro_batches);
  LOOM_CHECK(part_times.size() == static_cast<size_t>(2 * stages), "zero_bubble_v_schedule: ", part_times.size(),
             " parts' pass times for ", stages, " stages (", 2 * stages, " parts)");
  for (const PassTimes& times : part_times)  // a pass may take no time (a part without weights has no W)
    LOOM_CHECK(times.forward >= 0 && times.backward_input >= 0 && times.backward_weight >= 0 &&
                   std::isfinite(times.forward + times.backward_input + times.backward_weight),
               "zero_bubble_v_schedule: pass times must be finite and not negative, got F ", times.forward, " I ",
               times.backward_input, " W ", times.backward_weight);
  return VScheduleBuilder(stages, micro_batches, part_times).build();
}

}  // namespace loom::parallel
