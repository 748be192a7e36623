// The DistributedPipeline checks every backend runs: distributed_pipeline_test.cc
// with the threads backend, pipeline_mpi_test.cc under mpirun. Each function
// is one rank's part; every rank of the group calls it.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <ostream>
#include <utility>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/comm/device_mesh.h"
#include "parallel/pipeline/distributed_pipeline.h"
#include "tests/parallel/equivalence.h"

namespace loom::parallel::testing {

struct PipelineCase {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  std::vector<int> boundaries;  // where split_sequential cuts: `chunks` parts per rank (or stage)
  int micro_batches = 4;
  int64_t batch = 12;  // need not divide by micro_batches: then they differ by one
  Device device = Device::cpu();  // of every stage and of the reference
  int chunks = 1;                 // model chunks per stage (Interleaved1F1B; ZeroBubbleV: 2)

  int stages() const { return (static_cast<int>(boundaries.size()) + 1) / chunks; }
};

// How a failing case is named: "1f1b, cuts {2, 5}, 4 micro-batches, batch 12".
inline void PrintTo(const PipelineCase& c, std::ostream* out) {
  *out << schedule_name(c.kind);
  if (c.chunks > 1) *out << " x" << c.chunks << " chunks";
  *out << ", cuts {";
  for (size_t i = 0; i < c.boundaries.size(); ++i) *out << (i ? ", " : "") << c.boundaries[i];
  *out << "}, " << c.micro_batches << " micro-batches, batch " << c.batch << " on " << c.device;
}

// One rank's two models, alike: the single-device reference and the whole
// model whose stage this rank runs. Thread-safe only if called before the
// ranks' threads start (it seeds the global generator).
inline std::pair<nn::Sequential, nn::Sequential> pipeline_models(Device device = Device::cpu()) {
  manual_seed(5);
  nn::Sequential reference = make_pipeline_net();
  reference->to(kFloat64);
  reference->to(device);
  return {reference, nn::Sequential(reference->clone())};
}

// Three SGD-with-momentum steps of the reference on whole batches, side by
// side with a pipeline: `pipeline_step(x, y)` trains the pipeline on the same
// batch (its own optimizer) and returns its loss, or an undefined tensor where
// it has none; `compare(step)` then checks the parameters. The same gradient
// terms are summed in another order, so parameters agree to float64 rounding
// (1e-10) and losses to 1e-12.
inline void train_side_by_side(nn::Sequential reference, int64_t batch,
                               const std::function<Tensor(const Tensor& x, const Tensor& y)>& pipeline_step,
                               const std::function<void(int step)>& compare) {
  optim::SGD opt_reference(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  Generator gen(11);  // the same batches on every rank
  const Device device = reference->parameters().at(0).device();
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({batch, 6}, {.dtype = kFloat64}, &gen).to(device);
    Tensor y = randint(0, 3, {batch}, {.dtype = kInt64}, &gen).to(device);
    opt_reference.zero_grad();
    Tensor loss = nn::functional::cross_entropy(reference->forward(x), y);
    loss.backward();
    opt_reference.step();
    Tensor pipeline_loss = pipeline_step(x, y);
    if (pipeline_loss.defined()) {
      EXPECT_NEAR(pipeline_loss.item(), loss.item(), 1e-12) << "step " << step;
    }
    compare(step);
  }
}

inline Tensor cross_entropy_loss(const Tensor& out, const Tensor& target) {
  return nn::functional::cross_entropy(out, target);
}

// This rank's stage trained by a DistributedPipeline against the reference
// (which every rank trains itself).
inline void check_pipeline_matches_single_device(const std::shared_ptr<ProcessGroup>& group, nn::Sequential reference,
                                                 nn::Sequential model, const PipelineCase& c) {
  const int rank = group->rank(), p = group->size();
  ASSERT_EQ(p, c.stages()) << "one stage per rank";
  // This rank's parts: rank, p + rank, ... (one unless interleaved); in ZB-V's V, rank and 2p - 1 - rank.
  const Placement placement = placement_of(c.kind);
  const std::vector<nn::ModulePtr> chunks = stage_chunks(split_sequential(model, c.boundaries), rank, p, placement);
  const std::vector<nn::ModulePtr> reference_chunks =
      stage_chunks(split_sequential(reference, c.boundaries), rank, p, placement);
  DistributedPipeline pipe(chunks, group,
                           {.micro_batches = c.micro_batches, .schedule = c.kind, .chunks = c.chunks}, c.device);
  optim::SGD opt_pipe(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  const int loss_rank = placement == Placement::V ? 0 : p - 1;  // the model's last part
  EXPECT_EQ(pipe.loss_rank(), loss_rank);
  const bool first = rank == 0, last = rank == loss_rank;

  train_side_by_side(
      reference, c.batch,
      [&](const Tensor& x, const Tensor& y) {
        opt_pipe.zero_grad();
        // Each rank passes only what it reads.
        Tensor loss = pipe.train_step(first ? x : Tensor(), last ? y : Tensor(), cross_entropy_loss);
        opt_pipe.step();
        EXPECT_EQ(loss.defined(), last) << "only the loss rank has the loss";
        return loss;
      },
      [&](int step) {
        for (int k = 0; k < c.chunks; ++k)
          EXPECT_LT(max_param_difference(*reference_chunks[k], *chunks[k]), 1e-10)
              << "rank " << rank << ", chunk " << k << ", step " << step;
      });
  Generator gen(12);

  // Every rank gathers the trained stages: its whole model is the reference.
  share_stage_weights(split_sequential(model, c.boundaries), *group, placement);
  EXPECT_LT(max_param_difference(*reference, *model), 1e-10) << "rank " << rank << " after share_stage_weights";

  // Inference: the micro-batched forward ends on the loss rank with the
  // reference's output.
  Tensor x = randn({c.batch, 6}, {.dtype = kFloat64}, &gen).to(c.device);
  Tensor out = pipe.forward(first ? x : Tensor());
  if (last) {
    NoGradGuard no_grad;
    ASSERT_EQ(out.shape(), Shape({c.batch, 3}));
    EXPECT_LT(loom::testing::max_rel_error(out, reference->forward(x)), 1e-12);
  }
}

// Interleaved over `group` (2 chunks a rank) with activations of 256 KB,
// past MPI's eager limit: a send then waits for its receiver, so a rank
// whose activation header receive waited for its earlier sends would
// deadlock the ring (docs/comm.md, Semantics). Each part is a Linear and a
// Tanh, 256 wide; the loss is the whole model's, on the last rank.
inline void check_interleaved_with_large_activations(const std::shared_ptr<ProcessGroup>& group) {
  const int p = group->size(), r = group->rank();
  manual_seed(9);
  nn::Sequential model;
  std::vector<int> cuts;
  for (int i = 0; i < 2 * p; ++i) {
    if (i > 0) cuts.push_back(2 * i);
    model->push_back(nn::Linear(256, 256));
    model->push_back(nn::Tanh());
  }
  model->to(kFloat64);
  nn::Sequential reference(model->clone());
  const std::vector<nn::ModulePtr> parts = split_sequential(model, cuts);
  DistributedPipeline pipe(stage_chunks(parts, r, p), group,
                           {.micro_batches = 2 * p, .schedule = ScheduleKind::Interleaved1F1B, .chunks = 2});
  Generator gen(3);
  Tensor x = randn({256 * p, 256}, {.dtype = kFloat64}, &gen), y = randn({256 * p, 256}, {.dtype = kFloat64}, &gen);
  auto mse = [](const Tensor& out, const Tensor& target) { return ((out - target) * (out - target)).mean(); };
  Tensor loss = pipe.train_step(x, y, mse);
  if (r == p - 1) {
    NoGradGuard no_grad;
    EXPECT_NEAR(loss.item(), mse(reference->forward(x), y).item(), 1e-12);
  }
}

// Hybrid data x pipeline on a DeviceMesh {data, pipeline} of `world`: each
// pipeline trains on its data share of every batch (contiguous, equal), and
// each stage's gradients are averaged over the data group. The reference
// trains on whole batches; the pipelines' losses, averaged over the data
// group, are the batch's. Ranks other than data rank 0 start scrambled.
// `models`: this rank's pipeline_models(), made before any rank thread starts
// (they seed the global generator).
inline void check_hybrid_matches_single_device(const std::shared_ptr<ProcessGroup>& world, int data,
                                               std::vector<int> boundaries, ScheduleKind kind, int micro_batches,
                                               std::pair<nn::Sequential, nn::Sequential> models) {
  // Interleaved and ZB-V run two chunks a stage: 2P parts for P stages.
  const int chunks = chunks_for(kind), stages = (static_cast<int>(boundaries.size()) + 1) / chunks;
  DeviceMesh mesh(world, {{"data", data}, {"pipeline", stages}});
  const int d = mesh.coordinate("data"), p = mesh.coordinate("pipeline");
  auto [reference, model] = std::move(models);
  const Placement placement = placement_of(kind);
  const std::vector<nn::ModulePtr> stage = stage_chunks(split_sequential(model, boundaries), p, stages, placement);
  const std::vector<nn::ModulePtr> reference_stage =
      stage_chunks(split_sequential(reference, boundaries), p, stages, placement);
  if (d > 0) {
    NoGradGuard no_grad;
    for (const Tensor& t : parameters_of(stage)) t.fill_(0.1 * d);
  }
  DistributedPipeline pipe(stage, mesh.group("pipeline"), mesh.group("data"),
                           {.micro_batches = micro_batches, .schedule = kind, .chunks = chunks});
  optim::SGD opt_pipe(pipe.parameters(), {.lr = 0.1, .momentum = 0.9});
  const bool first = p == 0, last = p == pipe.loss_rank();
  const int64_t batch = 12, share = batch / data;

  train_side_by_side(
      reference, batch,
      [&](const Tensor& x, const Tensor& y) {
        opt_pipe.zero_grad();
        Tensor loss = pipe.train_step(first ? x.narrow(0, d * share, share) : Tensor(),
                                      last ? y.narrow(0, d * share, share) : Tensor(), cross_entropy_loss);
        opt_pipe.step();
        if (!last) return Tensor();
        Tensor mean = loss.clone();
        mesh.group("data")->all_reduce(mean, ReduceOp::Avg)->wait();  // only the pipelines' last stages
        return mean;
      },
      [&](int step) {
        EXPECT_LT(max_param_difference(parameters_of(reference_stage), parameters_of(stage)), 1e-10)
            << "data " << d << ", stage " << p << ", step " << step;
      });
  // Data parallelism moved each stage's gradients once per step, not once per micro-batch.
  int64_t stage_bytes = 0;
  for (const Tensor& t : parameters_of(stage)) stage_bytes += t.nbytes();
  EXPECT_EQ(mesh.group("data")->stats().bytes, 3 * stage_bytes + (last ? 3 * 8 : 0) + stage_bytes)
      << "three steps' all-reduces, the losses' averages, and the start's broadcast";
}

}  // namespace loom::parallel::testing
