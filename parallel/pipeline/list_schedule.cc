// ZB-V and ZB-H2 built by list scheduling: the ideal machine of
// simulator.h is run forward in time, and each time a stage is free it
// picks its next pass by the rule in schedule.h: the oldest ready I, else
// the oldest ready F while the memory cap allows, else the oldest W. The
// order each stage ran its passes in is the schedule; simulate_schedule of
// it replays the same step. The two schedules differ only in where their
// parts run and the cap (ListRule).
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

// What a list-scheduled pipeline is: where its parts run, and how many
// chunk activations (forwards not yet undone by their W) a stage may hold
// before it must run a W instead of a new forward.
struct ListRule {
  const char* name;  // for errors
  Placement placement;
  int chunks;
  int max_held;        // a stage runs a forward only while it holds fewer than this,
  int max_held_first;  // or than this for a micro-batch's first chunk
};

// The machine while the schedule is built: when each (part, micro-batch)'s
// forward and input gradient end, and what each stage has left to do.
class ListScheduleBuilder {
 public:
  ListScheduleBuilder(int stages, int micro_batches, std::vector<PassTimes> part_times, ListRule rule)
      : p_(stages), m_(micro_batches), parts_(rule.chunks * stages), rule_(rule), times_(std::move(part_times)),
        forward_end_(parts_, std::vector<double>(m_, kNever)), gradient_end_(forward_end_),
        stages_(p_, Stage(rule.chunks)), schedule_(p_) {}

  PipelineSchedule build() {
    const size_t total = static_cast<size_t>(3 * parts_ * m_);  // F, I, W of every part and micro-batch
    size_t placed = 0;
    while (placed < total) {
      // The stage that is free first decides first; one that found nothing
      // to do at its time lets the others at that time go before it again.
      int s = 0;
      for (int t = 1; t < p_; ++t)
        if (std::pair{stages_[t].free_at, stages_[t].deferred} < std::pair{stages_[s].free_at, stages_[s].deferred})
          s = t;
      Stage& stage = stages_[s];
      LOOM_CHECK(stage.free_at < kNever, rule_.name, ": no stage can go on (", placed, " of ", total,
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
    explicit Stage(int chunks) : next_forward(chunks, 0), awaiting_input(chunks), awaiting_weight(chunks) {}
    double free_at = 0;
    int deferred = 0;               // times it found nothing to do at free_at
    std::vector<int> next_forward;  // per chunk
    std::vector<std::vector<int>> awaiting_input, awaiting_weight;  // per chunk: micro-batches, oldest first
    int held = 0;                   // chunk activations, F to W
  };

  int part(int s, int chunk) const { return part_at({s, chunk}, p_, rule_.placement); }
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
    const int chunks = rule_.chunks;
    for (int c = 0; c < chunks; ++c)
      for (int mb : stage.awaiting_input[c]) {
        const int q = part(s, c);
        if (ended_by(forward_end_, q, mb, t) && (q == parts_ - 1 || ended_by(gradient_end_, q + 1, mb, t)))
          consider(Pass::BackwardInput, c, mb);
      }
    if (best.chunk < 0)
      for (int c = 0; c < chunks; ++c) {
        const int mb = stage.next_forward[c], q = part(s, c);
        const int cap = c == 0 ? rule_.max_held_first : rule_.max_held;
        if (mb < m_ && stage.held < cap && (q == 0 || ended_by(forward_end_, q - 1, mb, t)))
          consider(Pass::Forward, c, mb);
      }
    if (best.chunk < 0)
      for (int c = 0; c < chunks; ++c)
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

  const int p_, m_, parts_;
  const ListRule rule_;
  const std::vector<PassTimes> times_;  // [part]
  std::vector<std::vector<double>> forward_end_, gradient_end_;  // [part][micro-batch]
  std::vector<Stage> stages_;
  std::set<double> ends_;  // when the passes placed so far end
  PipelineSchedule schedule_;
};

// Checks the sizes and times, then builds.
PipelineSchedule build_list_schedule(int stages, int micro_batches, const std::vector<PassTimes>& part_times,
                                     const ListRule& rule) {
  LOOM_CHECK(stages >= 1 && micro_batches >= 1, rule.name, ": need at least one stage and one micro-batch, got ",
             stages, " and ", micro_batches);
  LOOM_CHECK(part_times.size() == static_cast<size_t>(rule.chunks * stages), rule.name, ": ", part_times.size(),
             " parts' pass times for ", stages, " stages (", rule.chunks * stages, " parts)");
  for (const PassTimes& times : part_times)  // a pass may take no time (a part without weights has no W)
    LOOM_CHECK(times.forward >= 0 && times.backward_input >= 0 && times.backward_weight >= 0 &&
                   std::isfinite(times.forward + times.backward_input + times.backward_weight),
               rule.name, ": pass times must be finite and not negative, got F ", times.forward, " I ",
               times.backward_input, " W ", times.backward_weight);
  return ListScheduleBuilder(stages, micro_batches, part_times, rule).build();
}

// ZB-V: 2p chunk activations, one fewer before a micro-batch's first chunk
// so that a stage can always take the turn.
ListRule zero_bubble_v_rule(int stages) { return {"zero_bubble_v_schedule", Placement::V, 2, 2 * stages, 2 * stages - 1}; }

// ZB-H2: 2p - 1 micro-batches, which lets a stage run forwards ahead
// through what would be 1F1B's bubble.
ListRule zero_bubble_h2_rule(int stages) {
  return {"zero_bubble_h2_schedule", Placement::Loop, 1, 2 * stages - 1, 2 * stages - 1};
}

}  // namespace

PipelineSchedule zero_bubble_v_schedule(int stages, int micro_batches, PassTimes times) {
  LOOM_CHECK(stages >= 1, "zero_bubble_v_schedule: need at least one stage, got ", stages);
  return zero_bubble_v_schedule(stages, micro_batches, std::vector<PassTimes>(2 * stages, times));
}

PipelineSchedule zero_bubble_v_schedule(int stages, int micro_batches, const std::vector<PassTimes>& part_times) {
  return build_list_schedule(stages, micro_batches, part_times, zero_bubble_v_rule(stages));
}

PipelineSchedule zero_bubble_h2_schedule(int stages, int micro_batches, PassTimes times) {
  LOOM_CHECK(stages >= 1, "zero_bubble_h2_schedule: need at least one stage, got ", stages);
  return zero_bubble_h2_schedule(stages, micro_batches, std::vector<PassTimes>(stages, times));
}

PipelineSchedule zero_bubble_h2_schedule(int stages, int micro_batches, const std::vector<PassTimes>& part_times) {
  return build_list_schedule(stages, micro_batches, part_times, zero_bubble_h2_rule(stages));
}

}  // namespace loom::parallel
