// The alpha-beta projection against step times worked out by hand.
#include "parallel/planner/step_time.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom::parallel {
namespace {

// Two stages: forward 1 s + 2 s, backward 2 s + 4 s; optimizer 0.5 s;
// 100 parameter bytes, 10 activation bytes between the stages; input 40 and
// output 20 bytes. Link: 10 bytes/s, 0.1 s latency (slow, so every term shows).
Profile two_stages() {
  Profile p;
  p.stage_forward_s = {1, 2};
  p.stage_backward_s = {2, 4};
  p.boundary_bytes = {10};
  p.optimizer_s = 0.5;
  p.parameter_bytes = 100;
  p.input_bytes = 40;
  p.output_bytes = 20;
  return p;
}

ProjectionSettings settings(int buckets = 1) {
  return {.devices = 2, .micro_batches = 4, .ddp_buckets = buckets, .link = {10, 0.1}};
}

TEST(Projection, Single) { EXPECT_DOUBLE_EQ(project_step_seconds("single", two_stages(), settings()), 9.5); }

TEST(Projection, DataParallel) {
  // 9/2 + 0.5 + 2 * 1 * (0.1 + 100/10) + 2 * 1/2 * 60/10 = 4.5 + 0.5 + 20.2 + 6
  EXPECT_DOUBLE_EQ(project_step_seconds("dp", two_stages(), settings()), 31.2);
}

TEST(Projection, DdpHidesAllButTheLastBucketBehindBackward) {
  // Ring all-reduce: C = 2 * 1 * (k * 0.1 + 100 / (2 * 10)) = 2 (0.1 k + 5).
  // One bucket: C = 10.2, nothing overlaps: 4.5 + 0.5 + 10.2.
  EXPECT_NEAR(project_step_seconds("ddp", two_stages(), settings(1)), 15.2, 1e-12);
  // Four buckets: C = 10.8; backward per device 3 s hides all but max(C/4, C - 3) = 7.8.
  EXPECT_NEAR(project_step_seconds("ddp", two_stages(), settings(4)), 12.8, 1e-12);
  // Gradients sent in 16 bits, one bucket: C = 2 (0.1 + 50 / 20) = 5.2.
  EXPECT_NEAR(project_step_seconds("ddp_bf16", two_stages(), settings(1)), 10.2, 1e-12);
  EXPECT_NEAR(project_step_seconds("ddp_fp16", two_stages(), settings(1)), 10.2, 1e-12);
}

TEST(Projection, LayerSplitAndPipelines) {
  // Layer split: 9 + 0.5/2 + 2 * (0.1 + 10/10) = 11.45.
  EXPECT_NEAR(project_step_seconds("layer_split", two_stages(), settings()), 11.45, 1e-12);
  // Pipelines, m = 4: (4 + 1) * (6/4 + 2 * (0.1 + 10/4/10)) + 0.25 = 5 * 2.2 + 0.25.
  EXPECT_NEAR(project_step_seconds("gpipe", two_stages(), settings()), 11.25, 1e-12);
  EXPECT_NEAR(project_step_seconds("1f1b", two_stages(), settings()), 11.25, 1e-12);
  // Interleaved, two chunks: (8 + 1) * (6/8 + 2 * (0.1 + 10/4/10)) + 0.25 = 9 * 1.45 + 0.25: a shorter
  // bubble, but twice the hops.
  EXPECT_NEAR(project_step_seconds("interleaved", two_stages(), settings()), 13.3, 1e-12);
  // ZB-H1: the slowest stage's 2 + 4, one idle forward slot 2/4, and 1F1B's 5 hops of 0.7:
  // 6 + 0.5 + 3.5 + 0.25, a whole second under 1F1B's.
  EXPECT_NEAR(project_step_seconds("zb-h1", two_stages(), settings()), 10.25, 1e-12);
  // ZB-V: 6, one idle chunk forward 2/8, and twice 1F1B's hops, (8 + 1) * 0.7 = 6.3; 6 + 0.25 + 6.3 + 0.25:
  // on this slow link its messages cost more than the bubble it saves.
  EXPECT_NEAR(project_step_seconds("zb-v", two_stages(), settings()), 12.8, 1e-12);
  // Three stages (the third like the second): (8 + 2) * 0.7 hops; 6 + 2 * 2/8 + 7 + 0.5/3.
  Profile three = two_stages();
  three.stage_forward_s.push_back(2);
  three.stage_backward_s.push_back(4);
  three.boundary_bytes.push_back(10);
  ProjectionSettings three_devices = settings();
  three_devices.devices = 3;
  EXPECT_NEAR(project_step_seconds("zb-v", three, three_devices), 6 + 0.5 + 7 + 0.5 / 3, 1e-12);
}

TEST(Projection, ShardedDataParallel) {
  // C1 = 2 * 1 * (0.1 + 100 / (2 * 10)) = 10.2; each rank steps half: 0.25.
  // ZeRO-1: 4.5 + 0.25 + 10.2, nothing hidden.
  EXPECT_NEAR(project_step_seconds("zero1", two_stages(), settings()), 14.95, 1e-12);
  // ZeRO-2: the reduce-scatter (5.1) behind backward (3 s per rank) leaves 2.1; the all-gather 5.1 after.
  EXPECT_NEAR(project_step_seconds("zero2", two_stages(), settings()), 4.5 + 0.25 + 2.1 + 5.1, 1e-12);
  // FSDP: 1.5 C1 = 15.3 outlasts the 4.5 s of compute it hides behind.
  EXPECT_NEAR(project_step_seconds("fsdp", two_stages(), settings()), 15.3 + 0.25, 1e-12);
}

TEST(Projection, HybridDataTimesPipeline) {
  // D = 2, P = 2 stages, m = 4: the slowest stage on half the batch takes 6/2 = 3 s; a hop carries 10/2/4
  // bytes: 2 * (0.1 + 0.125) = 0.45; (4 + 1) * (3/4 + 0.45) = 6. A stage's all-reduce of 50 bytes over 2
  // ranks, 2 * (0.1 + 50/20) = 5.2, overlaps 3/8 s of its last backward: 4.825. Optimizer 0.5/4.
  ProjectionSettings s = settings();
  s.mesh_data = 2;
  EXPECT_NEAR(project_step_seconds("hybrid", two_stages(), s), 6 + 4.825 + 0.125, 1e-12);
}

TEST(Projection, CheckpointingAddsOneForwardAndTensorParallelIsNotModelled) {
  // Forward 1 + 2 = 3 s again in backward: all of it on one device, half of it on each of two ranks.
  EXPECT_NEAR(project_step_seconds("single_ckpt", two_stages(), settings()), 9.5 + 3, 1e-12);
  EXPECT_NEAR(project_step_seconds("ddp_ckpt", two_stages(), settings(1)), 15.2 + 1.5, 1e-12);
  EXPECT_EQ(project_step_seconds("tp", two_stages(), settings()), -1);
}

TEST(Projection, UnknownStrategy) {
  EXPECT_THROW_MSG(project_step_seconds("zero", two_stages(), settings()), "unknown strategy 'zero'");
}

}  // namespace
}  // namespace loom::parallel
