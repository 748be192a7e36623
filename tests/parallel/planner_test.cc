// The planner against numbers worked out by hand: the cluster table, the
// ZeRO accounting per rank, a pipeline's micro-batches in flight, tensor
// parallelism's activation shares, the fit, MFU and the choice of the best;
// and the profile of a small MLP against its hand-counted parameters, state
// and FLOPs. tests/bench/plan_check_test.sh checks the memory against
// compare_parallel's measurement.
#include "parallel/planner/planner.h"

#include <gtest/gtest.h>

#include "nn/nn.h"
#include "tensor/creation.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

TEST(Cluster, ParsesNodesDevicesAndKinds) {
  const Cluster c = parse_cluster("2x8xh100-sxm");
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.devices_per_node, 8);
  EXPECT_EQ(c.devices(), 16);
  EXPECT_DOUBLE_EQ(c.device.peak_flops("bf16"), 989.4e12);
  EXPECT_DOUBLE_EQ(c.link_for(8).bandwidth_bytes_per_s, 370e9);  // NVLink inside a node
  EXPECT_DOUBLE_EQ(c.link_for(16).bandwidth_bytes_per_s, 45e9);  // the network across
  EXPECT_EQ(parse_cluster("h200").devices(), 1);
  EXPECT_EQ(parse_cluster("4xa100-sxm").devices_per_node, 4);
  EXPECT_THROW_MSG(parse_cluster("8xv100"), "unknown device kind 'v100' (known: cpu, h100-sxm");
  EXPECT_THROW_MSG(parse_cluster("2x2xcpu"), "this machine is one node");
  EXPECT_THROW_MSG(parse_cluster("a100-sxm").device.peak_flops("fp8"), "has no fp8 rate");
  EXPECT_THROW_MSG(parse_cluster("h100-sxm").device.peak_flops("fp64"), "precision 'fp64' is none of");
}

TEST(DeviceTable, NamesCudaReportsAndUnknownGpusHaveNoPeak) {
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H100 80GB HBM3", "fp32"), 66.9e12);
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H100 PCIe", "tf32"), 378.0e12);
  EXPECT_DOUBLE_EQ(dense_peak_flops("NVIDIA H200", "fp8"), 1978.9e12);
  EXPECT_EQ(dense_peak_flops("NVIDIA GeForce RTX 4090", "bf16"), 0);
  EXPECT_EQ(dense_peak_flops("NVIDIA H200", "int4"), 0);
}

// A model of 1000 float32 parameters in four equal Linear-like parts, each
// keeping 100 bytes a sample and sending 10, its backward's temporaries 50
// bytes plus 20 a sample; a step's activations 400 bytes a sample plus 200
// fixed; 10 forward and 30 training FLOPs a sample.
ModelProfile four_parts() {
  ModelProfile p;
  p.parameters = 1000;
  p.state_bytes = 16000;
  p.step_bytes = {200, 400};
  p.flops_per_sample = 30;
  p.forward_flops_per_sample = 10;
  for (int i = 0; i < 4; ++i) {
    ModelProfile::Part part{std::to_string(i), 250, 100, 10, 2.5};
    part.backward_bytes = {50, 20};
    p.parts.push_back(part);
  }
  p.largest_part = 250;
  return p;
}

// Four "GPUs" of 1 MB and 1 GFLOP/s at fp32, fully efficient, links of 1 GB/s.
PlanOptions four_devices() {
  PlanOptions o;
  o.global_batch = 64;
  o.cluster.device = {"test", "test device", 1000000, 1e9, 1e9, 2e9, 0, {1e9, 0}};
  o.cluster.devices_per_node = 4;
  o.compute_efficiency = 1;
  o.micro_batches = 4;
  return o;
}

TEST(Planner, DataParallelRanksFollowTheZeroAccounting) {
  const PlanReport p = plan(four_parts(), four_devices());
  const double act = 200 + 400 * 16;  // 16 samples a rank
  const StrategyPlan* ddp = p.find("ddp");
  ASSERT_NE(ddp, nullptr);
  EXPECT_EQ(ddp->batch_per_rank, 16);
  EXPECT_EQ(ddp->memory.parameters, 4000);
  EXPECT_EQ(ddp->memory.gradients, 4000);
  EXPECT_EQ(ddp->memory.optimizer_state, 8000);
  EXPECT_EQ(ddp->memory.activations, act);
  EXPECT_EQ(ddp->memory.buffers, 4000);  // the gradient buckets
  EXPECT_EQ(p.find("zero1")->memory.total(), 4000 + 4000 + 2000 + act);
  // loom's ZeRO-2 holds the whole gradient until the reduce-scatter, then the shard.
  EXPECT_EQ(p.find("zero2")->memory.total(), 4000 + 4000 + 2000 + 1000 + act);
  const StrategyPlan* fsdp = p.find("fsdp");
  EXPECT_EQ(fsdp->memory.parameters + fsdp->memory.gradients + fsdp->memory.optimizer_state, 1000 + 1000 + 2000);
  EXPECT_EQ(fsdp->memory.gathered, 2 * 250 * 4);  // the largest unit's parameters and gradients
  EXPECT_EQ(ddp->all_ranks_bytes, 4 * ddp->memory.total());
  EXPECT_EQ(p.rows.back().strategy, "single");  // the reference row goes last
  // Compute: 30 FLOPs x 64 samples over 4 devices at 1 GFLOP/s.
  EXPECT_DOUBLE_EQ(ddp->time.compute_s, 30.0 * 64 / 4 / 1e9);
  // MFU: the model's FLOPs over the step's time and the four peaks.
  EXPECT_NEAR(ddp->mfu, 30.0 * 64 / (ddp->time.total() * 4 * 1e9), 1e-12);
}

TEST(Planner, PipelineStagesHoldTheirMicroBatchesInFlight) {
  const PlanReport p = plan(four_parts(), four_devices());
  // One part a stage: 250 parameters (4000 bytes of state with AdamW's two
  // moments), micro-batches of 16 samples keeping 100 bytes each.
  const StrategyPlan* gpipe = p.find("gpipe");
  const StrategyPlan* one_f_one_b = p.find("1f1b");
  ASSERT_NE(gpipe, nullptr);
  ASSERT_NE(one_f_one_b, nullptr);
  EXPECT_EQ(gpipe->batch_per_rank, 16);
  const int64_t state = 250 * 16, micro = 100 * 16;
  const int64_t backward = 50 + (100 + 20) * 16;  // the micro-batch in its backward, with the temporaries
  // GPipe: all 4 micro-batches on every stage; 1F1B: stage 0 holds 4 - 0.
  EXPECT_EQ(gpipe->memory.activations, 3 * micro + backward);
  EXPECT_EQ(one_f_one_b->memory.activations, 3 * micro + backward);
  EXPECT_EQ(gpipe->memory.parameters + gpipe->memory.gradients + gpipe->memory.optimizer_state, state);
  // The stages after the first keep each micro-batch's received input (10
  // bytes a sample): GPipe all 4; 1F1B those in flight and one gradient
  // sent back, up to 4 (stage 1: 3 + 1, stage 2: 2 + 1, stage 3: 1 + 1).
  EXPECT_EQ(gpipe->memory.buffers, 10 * 16 * 4);  // the largest rank is a later stage
  EXPECT_EQ(one_f_one_b->memory.buffers, 0);      // stage 0: it holds the most, and receives nothing
  EXPECT_EQ(one_f_one_b->pending_send_bytes, 0);
  EXPECT_EQ(gpipe->all_ranks_bytes, 4 * (state + 3 * micro + backward) + 3 * 10 * 16 * 4);
  // Over the stages 1F1B holds 3 + 2 + 1 + 0 micro-batches beside the one in its backward.
  EXPECT_EQ(one_f_one_b->all_ranks_bytes, 4 * (state + backward) + 6 * micro + 10 * 16 * (4 + 3 + 2));
  // The bubble: (stages - 1) micro-batch slots of the slowest stage's forward and backward.
  EXPECT_NEAR(gpipe->time.bubble_s, 3 * (30.0 * 64 / 4 / 1e9) / 4, 1e-15);
}

// A stage that begins with a ReLU keeps the input the ReLU would free, and
// its backward peaks where what is held and the temporaries add most.
TEST(Planner, APipelineStageKeepsTheInputItsFirstPartWouldFree) {
  ModelProfile p = four_parts();
  // Part 1 a ReLU: it keeps its output (10 bytes a sample) and frees its
  // input (10): nothing added. Part 2's backward has large temporaries.
  p.parts[1] = {"relu", 0, 0, 10, 0};
  p.parts[1].input_freed_bytes_per_sample = 10;
  p.parts[1].backward_bytes = {0, 20};
  p.parts[2].backward_bytes = {1000, 500};
  PlanOptions o = four_devices();
  o.cluster.devices_per_node = 2;
  o.stage_boundaries = {1};  // stage 0: part 0; stage 1: the ReLU, parts 2 and 3
  o.strategies = {"gpipe", "1f1b"};
  const PlanReport r = plan(p, o);
  const StrategyPlan* gpipe = r.find("gpipe");
  ASSERT_NE(gpipe, nullptr);
  const int64_t micro = 64 / 4;  // one pipeline of the 64 samples, 4 micro-batches
  EXPECT_EQ(gpipe->batch_per_rank, micro);
  // Stage 1 holds, a micro-batch and per sample, the ReLU's input it keeps
  // (10) and what its parts keep (0 + 100 + 100); part 2's backward peaks
  // with parts 1 and 2 held (110) and its 1000 + 500 a sample.
  const int64_t held = 10 + 0 + 100 + 100;
  const int64_t at_part_2 = 1000 + (10 + 0 + 100 + 500) * micro;
  const int64_t at_part_3 = 50 + (held + 20) * micro;
  ASSERT_GT(at_part_2, at_part_3);
  EXPECT_EQ(gpipe->memory.parameters, 500 * 4);
  EXPECT_EQ(gpipe->memory.activations, 3 * held * micro + at_part_2);
  EXPECT_EQ(gpipe->memory.buffers, 10 * micro * 4);  // the received inputs, as many as the micro-batches
  EXPECT_EQ(gpipe->pending_send_bytes, 0);
  // 1F1B's last stage: one micro-batch in flight, its received input and
  // the gradient it sent back for the one before, which may still be held.
  const StrategyPlan* one_f_one_b = r.find("1f1b");
  ASSERT_NE(one_f_one_b, nullptr);
  EXPECT_EQ(one_f_one_b->memory.activations, at_part_2);
  EXPECT_EQ(one_f_one_b->memory.buffers, 2 * 10 * micro);
  EXPECT_EQ(one_f_one_b->pending_send_bytes, 10 * micro);
}

TEST(Planner, TensorParallelActivationsFollowTheTransformerShares) {
  ModelProfile t = four_parts();
  t.parts.resize(1);
  t.attention_layers = 2;
  t.heads = 4;
  t.embed_dim = 8;
  t.tokens_per_sample = 16;
  t.shardable_parameters = 800;  // the rest (norms) stays whole on every rank
  const PlanReport p = plan(t, four_devices());
  const StrategyPlan* tp = p.find("tp");
  const StrategyPlan* sp = p.find("tp-sp");
  ASSERT_NE(tp, nullptr);
  ASSERT_NE(sp, nullptr);
  EXPECT_EQ(tp->memory.parameters, (200 + 800 / 4) * 4);
  // Without sequence parallelism 10 of 34 activation bytes stay whole.
  EXPECT_EQ(tp->memory.activations, static_cast<int64_t>(200.0 / 4 + 400.0 * 64 * (10 + 24.0 / 4) / 34));
  EXPECT_EQ(sp->memory.activations, static_cast<int64_t>(200.0 / 4 + 400.0 * 64 / 4));
  // Four all-reduces a layer of 64 x 16 tokens x 8 features x 4 bytes, ring over 4 at 1 GB/s.
  const double bytes = 64.0 * 16 * 8 * 4;
  EXPECT_NEAR(tp->time.comm_s, 2 * 4 * (2.0 * 3 * bytes / (4 * 1e9)), 1e-15);
  EXPECT_NE(p.find("cp"), nullptr);
  EXPECT_EQ(p.find("gpipe"), nullptr);  // one part: nothing to cut
}

TEST(Planner, TheBestIsTheFastestThatFitsAndHalfPrecisionHalvesActivations) {
  PlanOptions o = four_devices();
  o.cluster.device.memory_bytes = 20000;  // 18000 usable: only the sharded states with few activations fit
  const PlanReport p = plan(four_parts(), o);
  for (const StrategyPlan& r : p.rows) EXPECT_EQ(r.fits, r.memory.total() <= 18000) << r.strategy;
  ASSERT_NE(p.best(), nullptr);
  EXPECT_TRUE(p.best()->fits);
  for (const StrategyPlan& r : p.rows) {
    if (r.fits && r.ranks == 4) {
      EXPECT_LE(p.best()->time.total(), r.time.total()) << r.strategy;
    }
  }
  EXPECT_FALSE(p.find("ddp")->fits);
  EXPECT_NE(p.table().find("best: " + p.best()->strategy), std::string::npos);

  o.precision = "bf16";
  const PlanReport half = plan(four_parts(), o);
  EXPECT_EQ(half.find("ddp")->memory.activations, 200 + 400 * 16 / 2);
  EXPECT_DOUBLE_EQ(half.find("ddp")->time.compute_s, 30.0 * 64 / 4 / 2e9);  // the bf16 peak
  o.global_batch = 63;
  EXPECT_THROW_MSG(plan(four_parts(), o), "a global batch of 63 does not split over 4 ranks");
  o.global_batch = 64;
  o.strategies = {"zero3"};
  EXPECT_THROW_MSG(plan(four_parts(), o), "unknown strategy 'zero3'");
}

TEST(ModelProfile, AnMlpsParametersStateAndFlopsAsCountedByHand) {
  manual_seed(0);
  nn::Sequential mlp(nn::Linear(16, 32), nn::ReLU(), nn::Linear(32, 8));
  const Tensor x = randn({32, 16});
  const Tensor y = randint(0, 8, {32});
  const ModelProfile p = profile_model(*mlp, {x, y});
  const int64_t psi = 16 * 32 + 32 + 32 * 8 + 8;
  EXPECT_EQ(p.parameters, psi);
  // Parameters, gradients and AdamW's two moments (and a step count per parameter tensor).
  EXPECT_GE(p.state_bytes, 16 * psi);
  EXPECT_LE(p.state_bytes, 16 * psi + 4 * 64);
  // Forward 2 (16 x 32 + 32 x 8) a sample; backward: both layers' weight
  // gradients, and the second's input gradient (the first's input needs none).
  const double forward = 2.0 * (16 * 32 + 32 * 8);
  EXPECT_DOUBLE_EQ(p.forward_flops_per_sample, forward);
  EXPECT_DOUBLE_EQ(p.flops_per_sample, forward + forward + 2.0 * 32 * 8);
  ASSERT_EQ(p.parts.size(), 3u);
  EXPECT_EQ(p.parts[0].parameters, 16 * 32 + 32);
  EXPECT_DOUBLE_EQ(p.parts[0].output_bytes_per_sample, 32 * 4);
  EXPECT_EQ(p.largest_part, 16 * 32 + 32);
  // A step keeps at least each layer's input and output a sample.
  EXPECT_GE(p.step_bytes.per_sample, (16 + 32 + 8) * 4);
  // The ReLU keeps its output and frees its input (the first Linear's
  // output, which nothing saved); a Linear keeps its input.
  EXPECT_DOUBLE_EQ(p.parts[1].input_freed_bytes_per_sample, 32 * 4);
  EXPECT_DOUBLE_EQ(p.parts[1].kept_bytes_per_sample, 0);
  EXPECT_DOUBLE_EQ(p.parts[2].input_freed_bytes_per_sample, 0);
  // The last Linear's backward: the incoming gradient (8 a sample) and the
  // input's (32), and its weight and bias gradients added into those there.
  EXPECT_DOUBLE_EQ(p.parts[2].backward_bytes.per_sample, (8 + 32) * 4);
  EXPECT_GE(p.parts[2].backward_bytes.fixed, (32 * 8 + 8) * 4);
  EXPECT_LE(p.parts[2].backward_bytes.fixed, 2 * (32 * 8 + 8) * 4);
  EXPECT_THROW_MSG(profile_model(*mlp, {x, y.narrow(0, 0, 8)}), "input has 32 samples and its target 8");
}

}  // namespace
}  // namespace loom::parallel
