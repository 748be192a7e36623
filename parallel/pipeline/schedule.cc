#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <sstream>

#include "tensor/error.h"

namespace loom::parallel {
namespace {

void check_sizes(const char* name, int stages, int micro_batches) {
  LOOM_CHECK(stages >= 1 && micro_batches >= 1, name, ": need at least one stage and one micro-batch, got ", stages,
             " and ", micro_batches);
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
  PipelineSchedule schedule(stages);
  for (int s = 0; s < stages; ++s) {
    auto& actions = schedule[s];
    const int warmup = std::min(stages - s - 1, micro_batches);
    int next_forward = 0, next_backward = 0;
    for (; next_forward < warmup; ++next_forward) actions.push_back({Pass::Forward, next_forward});
    while (next_forward < micro_batches) {  // steady state: one forward, one backward
      actions.push_back({Pass::Forward, next_forward++});
      actions.push_back({Pass::Backward, next_backward++});
    }
    while (next_backward < micro_batches) actions.push_back({Pass::Backward, next_backward++});  // cool-down
  }
  return schedule;
}

PipelineSchedule make_schedule(ScheduleKind kind, int stages, int micro_batches) {
  return kind == ScheduleKind::GPipe ? gpipe_schedule(stages, micro_batches)
                                     : one_f_one_b_schedule(stages, micro_batches);
}

std::string to_string(const PipelineSchedule& schedule) {
  std::ostringstream out;
  for (size_t s = 0; s < schedule.size(); ++s) {
    out << "stage " << s << ":";
    for (const Action& a : schedule[s]) out << ' ' << (a.pass == Pass::Forward ? 'F' : 'B') << a.micro_batch;
    out << '\n';
  }
  return out.str();
}

double ideal_bubble_fraction(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / (micro_batches + stages - 1);
}

}  // namespace loom::parallel
