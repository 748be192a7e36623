// The alpha-beta model of a strategy's step time on N independent devices,
// from a profile of one device (measured by compare_parallel, or derived from
// counted FLOPs and a device table by the planner, planner.h).
//
// A message of b bytes over a link costs alpha + b / bandwidth. From the
// single-device profile (forward and backward time of each pipeline stage on
// the whole batch, optimizer time, parameter and boundary-activation bytes):
//
//   single        F + B + O
//   DataParallel  (F + B)/N + O + 2(N-1)(alpha + P/bw)          broadcast + reduce from device 0, serial
//                 + 2(N-1)/N (In + Out)/bw                       scatter inputs, gather outputs (and back)
//   DDP           (F + B)/N + O + max(C/k, C - B/N)              ring all-reduce C = 2(N-1)(k alpha + P/(N bw)),
//                                                                k buckets, hidden behind backward but the last
//   layer split   F + B + O/N + 2 sum_s (alpha + A_s/bw)         one device busy at a time
//   GPipe, 1F1B   (m + N - 1)(max_s (F_s + B_s)/m                m micro-batches, N stages: the bubble is N - 1
//                   + 2(alpha + A_max/(m bw))) + O/N             micro-batch slots (1F1B: same time, less memory)
//   interleaved   (v m + N - 1)(max_s (F_s + B_s)/(v m)          v chunks a stage: N - 1 slots of 1/v the work,
//                   + 2(alpha + A_max/(m bw))) + O/N             v times the messages
//   ZB-H1         F_k + B_k + (N - 1) F_k/m                      1F1B's messages; its weight-gradient passes
//                   + (m + N - 1) 2(alpha + A_max/(m bw)) + O/N  (taken as half a backward) fill the waits, so
//                                                                each bubble slot is a forward (k: the stage
//                                                                with the largest F + B)
//   ZB-V          F_k + B_k + (N - 1) F_k/(2m)                   two half-stage chunks in a V: the waits are the
//                   + (2m + N - 1) 2(alpha + A_max/(m bw))       first micro-batch's way down, a chunk forward
//                   + O/N                                        a stage; each chunk has its own messages
//   ZeRO-1        (F + B)/N + O/N + C1                           reduce-scatter + all-gather (C1 = C with k = 1)
//                                                                in step(), nothing hidden; each rank steps 1/N
//   ZeRO-2        (F + B)/N + O/N + max(0, C1/2 - B/N) + C1/2    the reduce-scatter hidden behind backward
//   FSDP          max((F + B)/N, 1.5 C1) + O/N                   two all-gathers and a reduce-scatter, prefetched
//                                                                behind compute
//   hybrid D x P  (m + P - 1)(max_s (F_s + B_s)/(m D)            P-stage pipelines on 1/D of the batch each; a
//                   + 2(alpha + A_max/(m D bw)))                 stage's all-reduce over its D ranks (P/P bytes)
//                   + max(0, C_s - max_s(F_s + B_s)/(2 m D))     overlaps its last backward
//                   + O/(D P)
//
// where F, B are summed over stages, O is the optimizer step, P the parameter
// bytes, A_s the activation bytes leaving stage s. It ignores contention and
// the host's own overheads, so it is a floor; compare_parallel prints it
// beside the measurement to show how far reality is from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::parallel {

// The interleaved pipeline's model chunks per stage (compare_parallel's row).
inline constexpr int kInterleavedChunks = 2;

struct Link {
  double bandwidth_bytes_per_s;
  double latency_s;
  // Defaults: PCIe 4.0 x16 (~25 GB/s achieved, ~10 us) and NVLink 4 (H100:
  // ~370 GB/s achieved per direction for collectives, ~5 us).
  static Link pcie() { return {25e9, 10e-6}; }
  static Link nvlink() { return {370e9, 5e-6}; }
  double seconds(double bytes) const { return latency_s + bytes / bandwidth_bytes_per_s; }
};

struct Profile {
  std::vector<double> stage_forward_s, stage_backward_s;  // whole batch, per pipeline stage
  std::vector<double> boundary_bytes;                     // activation bytes leaving stage s (s < last)
  double optimizer_s = 0;
  double parameter_bytes = 0;
  double input_bytes = 0, output_bytes = 0;  // one batch
  double forward_s() const;
  double backward_s() const;
};

struct ProjectionSettings {
  int devices = 2;
  int micro_batches = 4;
  int ddp_buckets = 1;
  int mesh_data = 1;  // hybrid: D (the profile's stages are its P)
  Link link = Link::pcie();
};

// "ddp", or DDP with its gradient buckets sent in 16 bits: "ddp_bf16", "ddp_fp16".
inline bool is_ddp(const std::string& strategy) {
  return strategy == "ddp" || strategy == "ddp_bf16" || strategy == "ddp_fp16";
}

// The pipeline strategies, each named as its schedule (parallel::schedule_kind).
inline bool is_pipeline(const std::string& strategy) {
  return strategy == "gpipe" || strategy == "1f1b" || strategy == "interleaved" || strategy == "zb-h1" ||
         strategy == "zb-h2" || strategy == "zb-v";
}

// A pipeline strategy's model chunks per stage: interleaved kInterleavedChunks, zb-v 2 (its V), the others 1.
inline int chunks_of(const std::string& strategy) {
  return strategy == "interleaved" ? kInterleavedChunks : strategy == "zb-v" ? 2 : 1;
}

// Predicted seconds per step for "single", "dp", "ddp" (and "ddp_bf16",
// "ddp_fp16": half the bytes), "zero1", "zero2",
// "fsdp", "layer_split", "gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v" (the stages in the profile are the N
// devices) or "hybrid" (the profile's stages are the mesh's P); any of them
// with "_ckpt" (activation checkpointing) adds one forward, shared like the
// rest. -1 for "tp", "tp-sp", "hybrid-tp" and the context-parallel "cp",
// "cp-zigzag", "cp-ring", "cp-ring-zigzag", "cp-ulysses", "cp-ulysses-zigzag"
// and "cp-tp", which it does not model.
double project_step_seconds(const std::string& strategy, const Profile& profile, const ProjectionSettings& s);

// A ring all-reduce of `bytes` over `ranks` on `link`, sent in `messages`
// pieces: 2(N-1)(k alpha + bytes/(N bw)); 0 on one rank. A reduce-scatter
// and an all-gather together move the same.
double ring_all_reduce_seconds(double ranks, double bytes, const Link& link, double messages = 1);

}  // namespace loom::parallel
