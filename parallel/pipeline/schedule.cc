#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "tensor/error.h"

namespace loom::parallel {
namespace {

void check_sizes(const char* name, int stages, int micro_batches) {
  LOOM_CHECK(stages >= 1 && micro_batches >= 1, name, ": need at least one stage and one micro-batch, got ", stages,
             " and ", micro_batches);
}

// One stage's 1F1B order over `passes` forwards and as many backwards:
// `warmup` forwards, then one forward and one backward while forwards are
// left, then the remaining backwards (the cool-down). nth(pass, k) is the
// stage's k-th pass of that kind.
template <typename Nth>
std::vector<Action> warm_up_alternate_cool_down(int warmup, int passes, const Nth& nth) {
  std::vector<Action> actions;
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) actions.push_back(nth(Pass::Forward, next_forward));
  while (next_forward < passes) {
    actions.push_back(nth(Pass::Forward, next_forward++));
    actions.push_back(nth(Pass::Backward, next_backward++));
  }
  while (next_backward < passes) actions.push_back(nth(Pass::Backward, next_backward++));
  return actions;
}

}  // namespace

PipelineSchedule gpipe_schedule(int stages, int micro_batches) {
  check_sizes("gpipe_schedule", stages, micro_batches);
  PipelineSchedule schedule(stages);
  for (auto& actions : schedule) {
    for (int i = 0; i < micro_batches; ++i) actions.push_back({Pass::Forward, i});
    for (int i = 0; i < micro_batches; ++i) actions.push_back({Pass::Backward, i});
  }
  return schedule;
}

PipelineSchedule one_f_one_b_schedule(int stages, int micro_batches) {
  check_sizes("one_f_one_b_schedule", stages, micro_batches);
  auto nth = [](Pass pass, int k) { return Action{pass, k}; };
  PipelineSchedule schedule(stages);
  for (int s = 0; s < stages; ++s)
    schedule[s] = warm_up_alternate_cool_down(std::min(stages - s - 1, micro_batches), micro_batches, nth);
  return schedule;
}

PipelineSchedule interleaved_one_f_one_b_schedule(int stages, int chunks, int micro_batches) {
  check_sizes("interleaved_one_f_one_b_schedule", stages, micro_batches);
  LOOM_CHECK(chunks >= 1, "interleaved_one_f_one_b_schedule: need at least one chunk per stage, got ", chunks);
  if (chunks == 1) return one_f_one_b_schedule(stages, micro_batches);
  LOOM_CHECK(micro_batches % stages == 0, "interleaved_one_f_one_b_schedule: ", micro_batches,
             " micro-batches are not a multiple of the ", stages, " stages");
  // A stage's k-th forward (and k-th backward): micro-batches go in groups
  // of p through chunk 0, the same group through chunk 1, ..., then the next
  // group; backwards take the chunks in reverse.
  const int passes = chunks * micro_batches, group = stages * chunks;
  auto nth = [&](Pass pass, int k) {
    const int chunk = (k % group) / stages;
    return Action{pass, (k / group) * stages + k % stages, pass == Pass::Forward ? chunk : chunks - 1 - chunk};
  };
  PipelineSchedule schedule(stages);
  for (int s = 0; s < stages; ++s) {
    // Forwards before the first backward: enough that the stage never idles
    // while the first group travels on through the later stages and chunks
    // and its gradient comes back (Megatron-LM's count). With fewer, the
    // schedule still finishes, with the same bubble but more waits in the middle.
    const int warmup = std::min(2 * (stages - s - 1) + (chunks - 1) * stages, passes);
    schedule[s] = warm_up_alternate_cool_down(warmup, passes, nth);
  }
  return schedule;
}

PipelineSchedule zero_bubble_h1_schedule(int stages, int micro_batches) {
  check_sizes("zero_bubble_h1_schedule", stages, micro_batches);
  PipelineSchedule schedule(stages);
  for (int s = 0; s < stages; ++s) {
    // 1F1B with each B split into I and W: a W follows an I once more than s
    // micro-batches wait for theirs. The later the stage, the sooner its
    // gradient is needed upstream, so the more Ws it puts off; the rest fill
    // the cool-down, where a stage would wait for its next gradient.
    std::vector<Action>& actions = schedule[s];
    int next_weight = 0;
    auto input_then_weight = [&](int k) {
      actions.push_back({Pass::BackwardInput, k});
      if (k + 1 - next_weight > s) actions.push_back({Pass::BackwardWeight, next_weight++});
    };
    const int warmup = std::min(stages - s - 1, micro_batches);
    int next_forward = 0, next_input = 0;
    for (; next_forward < warmup; ++next_forward) actions.push_back({Pass::Forward, next_forward});
    while (next_forward < micro_batches) {
      actions.push_back({Pass::Forward, next_forward++});
      input_then_weight(next_input++);
    }
    while (next_input < micro_batches) input_then_weight(next_input++);
    while (next_weight < micro_batches) actions.push_back({Pass::BackwardWeight, next_weight++});
  }
  return schedule;
}

PipelineSchedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  LOOM_CHECK(chunks == 1 || kind == ScheduleKind::Interleaved1F1B, "make_schedule: the ", schedule_name(kind),
             " schedule runs one chunk per stage, got ", chunks);
  switch (kind) {
    case ScheduleKind::GPipe: return gpipe_schedule(stages, micro_batches);
    case ScheduleKind::OneFOneB: return one_f_one_b_schedule(stages, micro_batches);
    case ScheduleKind::Interleaved1F1B: return interleaved_one_f_one_b_schedule(stages, chunks, micro_batches);
    case ScheduleKind::ZeroBubbleH1: return zero_bubble_h1_schedule(stages, micro_batches);
  }
  LOOM_FAIL("make_schedule: unknown schedule kind");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved1F1B: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

ScheduleKind schedule_kind(const std::string& name) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::ZeroBubbleH1})
    if (name == schedule_name(kind)) return kind;
  LOOM_FAIL("unknown pipeline schedule '", name, "': expected gpipe, 1f1b, interleaved or zb-h1");
}

namespace {

const char* pass_letter(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "F";
    case Pass::Backward: return "B";
    case Pass::BackwardInput: return "I";
    case Pass::BackwardWeight: return "W";
  }
  return "?";
}

std::string action_name(const Action& a, bool with_chunk) {
  std::string name = pass_letter(a.pass) + std::to_string(a.micro_batch);
  return with_chunk ? name + ":" + std::to_string(a.chunk) : name;
}

bool has_chunks(const PipelineSchedule& schedule) {
  for (const auto& actions : schedule)
    for (const Action& a : actions)
      if (a.chunk != 0) return true;
  return false;
}

}  // namespace

std::string to_string(const PipelineSchedule& schedule) {
  const bool with_chunk = has_chunks(schedule);
  std::ostringstream out;
  for (size_t s = 0; s < schedule.size(); ++s) {
    out << "stage " << s << ":";
    for (const Action& a : schedule[s]) out << ' ' << action_name(a, with_chunk);
    out << '\n';
  }
  return out.str();
}

SimulatedStep simulate_schedule(const PipelineSchedule& schedule, int chunks, PassTimes times) {
  const int p = static_cast<int>(schedule.size());
  LOOM_CHECK(p >= 1 && chunks >= 1, "simulate_schedule: need at least one stage and one chunk");
  // When each pass of (virtual stage, micro-batch) ended; virtual stage =
  // chunk * p + stage. `gradient_done`: its B or I, which sends the gradient on.
  std::map<std::pair<int, int>, double> forward_done, gradient_done;
  const int last_virtual = chunks * p - 1;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0), busy(p, 0);
  std::vector<int> held(p, 0);
  SimulatedStep step;
  step.peak_in_flight.assign(p, 0);
  step.passes.resize(p);
  // When `pass` of (v, mb) ended, or nothing if it has not run yet.
  auto ended = [](const std::map<std::pair<int, int>, double>& done, int v, int mb) -> std::optional<double> {
    auto it = done.find({v, mb});
    if (it == done.end()) return std::nullopt;
    return it->second;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < schedule[s].size()) {
        const Action& a = schedule[s][next[s]];
        LOOM_CHECK(a.chunk >= 0 && a.chunk < chunks, "simulate_schedule: stage ", s, " runs chunk ", a.chunk,
                   " of ", chunks);
        const int v = a.chunk * p + s, mb = a.micro_batch;
        // When its inputs are there; a pass whose input is not made yet waits.
        std::optional<double> ready = 0.0;
        double cost = 0;
        switch (a.pass) {
          case Pass::Forward:
            if (v > 0) ready = ended(forward_done, v - 1, mb);
            cost = times.forward;
            break;
          case Pass::Backward:
          case Pass::BackwardInput:
            ready = ended(forward_done, v, mb);
            if (ready && v < last_virtual) {
              const std::optional<double> gradient = ended(gradient_done, v + 1, mb);
              ready = gradient ? std::optional<double>(std::max(*ready, *gradient)) : std::nullopt;
            }
            cost = times.backward_input + (a.pass == Pass::Backward ? times.backward_weight : 0);
            break;
          case Pass::BackwardWeight:
            ready = ended(gradient_done, v, mb);
            cost = times.backward_weight;
            break;
        }
        if (!ready) break;
        const double end = std::max(free_at[s], *ready) + cost;
        if (a.pass == Pass::Forward) forward_done[{v, mb}] = end;
        if (a.pass == Pass::Backward || a.pass == Pass::BackwardInput) gradient_done[{v, mb}] = end;
        free_at[s] = end;
        busy[s] += cost;
        // A micro-batch's activations are held from its F to its B or W.
        if (a.pass != Pass::BackwardInput) held[s] += a.pass == Pass::Forward ? 1 : -1;
        step.peak_in_flight[s] = std::max(step.peak_in_flight[s], held[s]);
        step.passes[s].push_back({a, end - cost, end});
        ++next[s];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int s = 0; s < p; ++s)
    if (next[s] < schedule[s].size())
      stuck += " stage " + std::to_string(s) + " at " + action_name(schedule[s][next[s]], chunks > 1) + ";";
  LOOM_CHECK(stuck.empty(), "simulate_schedule: the schedule cannot finish, waiting:", stuck);
  for (double t : free_at) step.step_time = std::max(step.step_time, t);
  for (int s = 0; s < p; ++s) {
    step.idle_fraction.push_back(step.step_time > 0 ? 1 - busy[s] / step.step_time : 0);
    step.bubble_fraction += step.idle_fraction.back() / p;
  }
  return step;
}

std::string timeline(const std::vector<std::vector<PassTime>>& passes, double step_time, int width) {
  bool with_chunk = false;
  size_t widest = 0;
  double shortest = 0;
  for (const auto& row : passes)
    for (const PassTime& pass : row) {
      with_chunk |= pass.action.chunk != 0;
      if (pass.end > pass.start && (shortest == 0 || pass.end - pass.start < shortest)) shortest = pass.end - pass.start;
    }
  for (const auto& row : passes)
    for (const PassTime& pass : row) widest = std::max(widest, action_name(pass.action, with_chunk).size());
  if (shortest == 0) shortest = 1;
  const double columns_per_time = width > 0 && step_time > 0 ? width / step_time : (widest + 1) / shortest;
  auto column = [&](double t) { return static_cast<size_t>(std::max(0L, std::lround(t * columns_per_time))); };
  std::ostringstream out;
  for (size_t s = 0; s < passes.size(); ++s) {
    std::string row(column(step_time), '.');
    for (const PassTime& pass : passes[s]) {
      const size_t from = column(pass.start), to = column(pass.end);
      const std::string name = action_name(pass.action, with_chunk);
      for (size_t c = from; c < to && c < row.size(); ++c) row[c] = c - from < name.size() ? name[c - from] : ' ';
    }
    row.erase(row.find_last_not_of(' ') + 1);  // a pass that ends the step leaves no trailing blanks
    out << "stage " << s << ": " << row << '\n';
  }
  return out.str();
}

double ideal_bubble_fraction(int stages, int micro_batches, int chunks) {
  return static_cast<double>(stages - 1) / (static_cast<double>(chunks) * micro_batches + stages - 1);
}

double ideal_zero_bubble_h1_fraction(int stages, int micro_batches, PassTimes times) {
  const double idle = (stages - 1) * (times.forward + times.backward_input - times.backward_weight);
  return idle / (micro_batches * (times.forward + times.backward_input + times.backward_weight) + idle);
}

}  // namespace loom::parallel
