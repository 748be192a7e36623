// Pipeline schedules as data: for each stage, the ordered list of forward
// and backward passes of micro-batches it runs. Keeping them as data lets a
// schedule be printed, tested, simulated and analysed apart from the code
// that runs it.
//
//   PipelineSchedule s = one_f_one_b_schedule(/*stages=*/4, /*micro_batches=*/8);
//   std::cout << to_string(s);
//   // stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7
//   // ...
//   // stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7
//
// A zero-bubble schedule splits each backward in two (Qi et al. 2023):
// I, the gradient for the stage's input, which the previous stage waits
// for, and W, the weights' gradients, which no one waits for; W passes fill
// the time a stage would otherwise idle. B is a whole backward (I then W).
//
// In an interleaved schedule each stage (device) holds several model chunks:
// with p stages and v chunks the model is cut into p * v parts, and part i
// runs on stage i % p as its chunk i / p, so a micro-batch passes every
// stage v times. ZB-V places its two chunks in a V instead (Placement
// below). An action names its chunk, printed after a colon (F3:1 is
// micro-batch 3's forward through the stage's chunk 1).
#pragma once

#include <string>
#include <vector>

namespace loom::parallel {

// Forward (F), whole backward (B), and a backward split in two: the input's
// gradient (I) and, later, the weights' (W) (autograd/split_backward.h).
enum class Pass { Forward, Backward, BackwardInput, BackwardWeight };

struct Action {
  Pass pass;
  int micro_batch;
  int chunk = 0;  // which of the stage's model chunks (interleaved schedules)
  bool operator==(const Action& o) const {
    return pass == o.pass && micro_batch == o.micro_batch && chunk == o.chunk;
  }
};

using PipelineSchedule = std::vector<std::vector<Action>>;  // [stage] -> actions in order

enum class ScheduleKind { GPipe, OneFOneB, Interleaved1F1B, ZeroBubbleH1, ZeroBubbleH2, ZeroBubbleV };

// Where part i of a model cut into p * v parts runs. Loop (interleaved, and
// v = 1): stage i % p, as its chunk i / p. V (ZB-V, v = 2): down the stages
// and back up: stage s holds part s as chunk 0 and part 2p - 1 - s as chunk
// 1, so stage 0 has the first and the last part (the loss), and stage p - 1
// turns a micro-batch around without sending it anywhere.
enum class Placement { Loop, V };
struct StageChunk {
  int stage;
  int chunk;
};
Placement placement_of(ScheduleKind kind);
StageChunk place_part(int part, int stages, int chunks, Placement placement);
int part_at(StageChunk where, int stages, Placement placement);  // the inverse

// How long each pass of one chunk takes (in any unit); a whole backward (B)
// takes both halves. The zero-bubble V schedule is built from them.
struct PassTimes {
  double forward = 1;
  double backward_input = 1;   // I
  double backward_weight = 1;  // W
};

// GPipe (Huang et al. 2019): every stage runs all forwards, then all
// backwards (in micro-batch order, as PyTorch's ScheduleGPipe). Each stage
// holds the activations of all m micro-batches at once.
PipelineSchedule gpipe_schedule(int stages, int micro_batches);

// 1F1B / PipeDream-Flush (Narayanan et al. 2021): stage s first runs
// p - s - 1 forwards (warm-up), then alternates one forward and one backward,
// then finishes the remaining backwards. It has GPipe's bubble but holds at
// most p micro-batches' activations.
PipelineSchedule one_f_one_b_schedule(int stages, int micro_batches);

// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's virtual pipeline
// stages): each stage holds `chunks` model chunks and runs 1F1B over all of
// them, taking micro-batches in groups of p through one chunk after another.
// Each pass is 1/v of a stage's work, so the warm-up and cool-down (the
// bubble) shrink v times, for v times the messages. Needs micro_batches to
// be a multiple of stages (as Megatron-LM and PyTorch); chunks = 1 is 1F1B.
PipelineSchedule interleaved_one_f_one_b_schedule(int stages, int chunks, int micro_batches);

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B's order
// of forwards and input gradients (so the same messages in the same order),
// with each stage's weight gradients deferred to fill its waits: stage s
// runs a W once more than s input gradients are waiting for theirs, and the
// rest at the end. When F, I and W take equal time its stages idle a third
// as long as 1F1B's: (p - 1) / (3m + p - 1) of the step; each stage holds up to p micro-batches
// between F and W (1F1B: p - s between F and B), though between I and W
// only what the weights' gradients need (each product's input).
PipelineSchedule zero_bubble_h1_schedule(int stages, int micro_batches);

// ZB-H2 (Qi et al.): ZB-H1's one chunk a stage with twice its memory. Built
// by the list scheduling ZB-V uses (list_schedule.cc), with a stage
// allowed up to 2p - 1 micro-batches between F and W: it runs forwards
// ahead through what is 1F1B's warm-up bubble, and its W passes fill the
// waits at the end. With equal passes it idles only while the first
// micro-batch comes down and the last one's gradient goes back up.
PipelineSchedule zero_bubble_h2_schedule(int stages, int micro_batches, PassTimes times = {});
// The same for stages whose passes take different times (p of them).
PipelineSchedule zero_bubble_h2_schedule(int stages, int micro_batches, const std::vector<PassTimes>& part_times);

// ZB-V (Qi et al., the V schedule of "Zero Bubble Pipeline Parallelism"):
// two chunks a stage, placed in a V, with split backwards, built by list
// scheduling on the ideal machine (simulator.h) with passes of `times`
// (list_schedule.cc): whenever a stage is free it runs the oldest ready I,
// else the oldest ready F while it holds fewer than 2p chunk activations
// (2p - 1 for a new micro-batch's first chunk, so the turn can always go
// on), else the oldest W. A stage then holds what 1F1B's first stage holds
// (p micro-batches through a whole stage) and idles little more than the
// (p - 1) chunk forwards its first input takes to arrive: (p - 1) / (6m + p - 1)
// of the step with equal passes, exactly that for p = 2 and p = 4 with m >= p.
PipelineSchedule zero_bubble_v_schedule(int stages, int micro_batches, PassTimes times = {});
// The same for parts whose passes take different times (2p of them, in the
// model's order; measured ones: balance.h's part_pass_times).
PipelineSchedule zero_bubble_v_schedule(int stages, int micro_batches, const std::vector<PassTimes>& part_times);

// The model chunks a stage runs under `kind`: ZeroBubbleV 2 (its V), the
// interleaved schedule as many as asked (`interleaved`), the others 1.
int chunks_for(ScheduleKind kind, int interleaved = 2);

// Whether `kind` is list-scheduled for its parts' pass times (ZeroBubbleH2,
// ZeroBubbleV); the others have one order whatever the times.
bool built_for_pass_times(ScheduleKind kind);

// `chunks`: Interleaved1F1B takes any, the others chunks_for(kind).
// `part_times`, for the kinds built_for_pass_times: each part's pass times
// to build it for (empty: equal passes).
PipelineSchedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int chunks = 1,
                               const std::vector<PassTimes>& part_times = {});
const char* schedule_name(ScheduleKind kind);  // "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"
ScheduleKind schedule_kind(const std::string& name);  // the inverse; throws for another name

// "stage 0: F0 F1 ... B0 ...", one line per stage; chunks after a colon
// (F0:1) when the schedule has more than one.
std::string to_string(const PipelineSchedule& schedule);
// One action: "F3", or "F3:1" with its chunk.
std::string to_string(const Action& action, bool with_chunk = false);

}  // namespace loom::parallel
