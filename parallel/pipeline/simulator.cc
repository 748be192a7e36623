#include "parallel/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include "tensor/error.h"

namespace loom::parallel {

SimulatedStep simulate_schedule(const PipelineSchedule& schedule, int chunks, PassTimes times, Placement placement) {
  LOOM_CHECK(!schedule.empty() && chunks >= 1, "simulate_schedule: need at least one stage and one chunk");
  return simulate_schedule(schedule, chunks, std::vector<PassTimes>(schedule.size() * chunks, times), placement);
}

SimulatedStep simulate_schedule(const PipelineSchedule& schedule, int chunks, const std::vector<PassTimes>& part_times,
                                Placement placement) {
  const int p = static_cast<int>(schedule.size());
  LOOM_CHECK(p >= 1 && chunks >= 1, "simulate_schedule: need at least one stage and one chunk");
  LOOM_CHECK(part_times.size() == static_cast<size_t>(p * chunks), "simulate_schedule: ", part_times.size(),
             " parts' pass times for ", p, " stages x ", chunks, " chunks");
  LOOM_CHECK(placement == Placement::Loop || chunks == 2, "simulate_schedule: a V placement has two chunks, got ",
             chunks);
  // When each pass of (part, micro-batch) ended; the part is the model's
  // (virtual stage) that a stage's chunk runs (place_part).
  // `gradient_done`: its B or I, which sends the gradient on.
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
        const int v = part_at({s, a.chunk}, p, placement), mb = a.micro_batch;
        const PassTimes& times = part_times[v];
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
      stuck += " stage " + std::to_string(s) + " at " + to_string(schedule[s][next[s]], chunks > 1) + ";";
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
    for (const PassTime& pass : row) widest = std::max(widest, to_string(pass.action, with_chunk).size());
  if (shortest == 0) shortest = 1;
  const double columns_per_time = width > 0 && step_time > 0 ? width / step_time : (widest + 1) / shortest;
  auto column = [&](double t) { return static_cast<size_t>(std::max(0L, std::lround(t * columns_per_time))); };
  std::ostringstream out;
  for (size_t s = 0; s < passes.size(); ++s) {
    std::string row(column(step_time), '.');
    for (const PassTime& pass : passes[s]) {
      const size_t from = column(pass.start), to = column(pass.end);
      const std::string name = to_string(pass.action, with_chunk);
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

double one_step_lower_bound(int stages, int micro_batches, int chunks, PassTimes times) {
  const double idle = (stages - 1) * times.forward;
  return idle / (chunks * micro_batches * (times.forward + times.backward_input + times.backward_weight) + idle);
}

double zero_bubble_v_lower_bound(int stages, int micro_batches, PassTimes times) {
  return one_step_lower_bound(stages, micro_batches, 2, times);
}

}  // namespace loom::parallel
