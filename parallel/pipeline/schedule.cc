#include "parallel/pipeline/schedule.h"

#include <algorithm>
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

Placement placement_of(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV ? Placement::V : Placement::Loop;
}

StageChunk place_part(int part, int stages, int chunks, Placement placement) {
  LOOM_CHECK(part >= 0 && part < stages * chunks && (placement == Placement::Loop || chunks == 2), "place_part: part ",
             part, " of ", stages, " stages x ", chunks, " chunks", placement == Placement::V ? " in a V" : "");
  if (placement == Placement::Loop) return {part % stages, part / stages};
  return part < stages ? StageChunk{part, 0} : StageChunk{2 * stages - 1 - part, 1};
}

int part_at(StageChunk where, int stages, Placement placement) {
  if (placement == Placement::Loop) return where.chunk * stages + where.stage;
  return where.chunk == 0 ? where.stage : 2 * stages - 1 - where.stage;
}

int chunks_for(ScheduleKind kind, int interleaved) {
  if (kind == ScheduleKind::Interleaved1F1B) return interleaved;
  return kind == ScheduleKind::ZeroBubbleV ? 2 : 1;
}

bool built_for_pass_times(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleH2 || kind == ScheduleKind::ZeroBubbleV;
}

PipelineSchedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int chunks,
                               const std::vector<PassTimes>& part_times) {
  const int wanted = chunks_for(kind);
  LOOM_CHECK(chunks == wanted || kind == ScheduleKind::Interleaved1F1B, "make_schedule: the ", schedule_name(kind),
             " schedule runs ", wanted == 2 ? "two chunks" : "one chunk", " per stage, got ", chunks);
  LOOM_CHECK(part_times.empty() || built_for_pass_times(kind), "make_schedule: part_times are for the zb-h2 and "
             "zb-v schedules, not ", schedule_name(kind));
  switch (kind) {
    case ScheduleKind::GPipe: return gpipe_schedule(stages, micro_batches);
    case ScheduleKind::OneFOneB: return one_f_one_b_schedule(stages, micro_batches);
    case ScheduleKind::Interleaved1F1B: return interleaved_one_f_one_b_schedule(stages, chunks, micro_batches);
    case ScheduleKind::ZeroBubbleH1: return zero_bubble_h1_schedule(stages, micro_batches);
    case ScheduleKind::ZeroBubbleH2:
      return part_times.empty() ? zero_bubble_h2_schedule(stages, micro_batches)
                                : zero_bubble_h2_schedule(stages, micro_batches, part_times);
    case ScheduleKind::ZeroBubbleV:
      return part_times.empty() ? zero_bubble_v_schedule(stages, micro_batches)
                                : zero_bubble_v_schedule(stages, micro_batches, part_times);
  }
  LOOM_FAIL("make_schedule: unknown schedule kind");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved1F1B: return "interleaved";
    case ScheduleKind::ZeroBubbleH1: return "zb-h1";
    case ScheduleKind::ZeroBubbleH2: return "zb-h2";
    case ScheduleKind::ZeroBubbleV: return "zb-v";
  }
  return "?";
}

ScheduleKind schedule_kind(const std::string& name) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
                            ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleH2, ScheduleKind::ZeroBubbleV})
    if (name == schedule_name(kind)) return kind;
  LOOM_FAIL("unknown pipeline schedule '", name, "': expected gpipe, 1f1b, interleaved, zb-h1, zb-h2 or zb-v");
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

bool has_chunks(const PipelineSchedule& schedule) {
  for (const auto& actions : schedule)
    for (const Action& a : actions)
      if (a.chunk != 0) return true;
  return false;
}

}  // namespace

std::string to_string(const Action& a, bool with_chunk) {
  std::string name = pass_letter(a.pass) + std::to_string(a.micro_batch);
  return with_chunk ? name + ":" + std::to_string(a.chunk) : name;
}

std::string to_string(const PipelineSchedule& schedule) {
  const bool with_chunk = has_chunks(schedule);
  std::ostringstream out;
  for (size_t s = 0; s < schedule.size(); ++s) {
    out << "stage " << s << ":";
    for (const Action& a : schedule[s]) out << ' ' << to_string(a, with_chunk);
    out << '\n';
  }
  return out.str();
}

}  // namespace loom::parallel
