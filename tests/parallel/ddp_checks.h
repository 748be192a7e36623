// The DistributedDataParallel checks every backend runs: ddp_test.cc with the
// threads backend, ddp_mpi_test.cc under mpirun. Each function is one rank's
// part; every rank of the group calls it.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "tests/parallel/equivalence.h"

namespace loom::parallel::testing {

struct DdpCase {
  DType dtype = kFloat32;
  bool batch_norm = false;
  int micro_batches = 1;  // > 1: all but the last backward of a step run under no_sync()
  double tolerance = 1e-5;
  bool gradient_as_bucket_view = false;
  bool zero_grad_in_place = false;  // zero_grad(set_to_none = false): gradients keep their memory
  Device device = Device::cpu();    // of both models and the batches
};

// The two models one rank needs: the single-device reference (the same on
// every rank) and this rank's model, whose parameters and buffers on ranks
// other than 0 are scrambled: DDP must start every rank from rank 0's.
// Thread-safe only if called before the ranks' threads start (it seeds the
// global generator).
inline std::pair<nn::ModulePtr, nn::ModulePtr> ddp_models(int rank, const DdpCase& c) {
  manual_seed(7);
  nn::Sequential net = make_net(c.batch_norm);
  net->to(c.dtype);
  net->to(c.device);
  nn::ModulePtr local = net->clone();
  if (rank > 0) {
    NoGradGuard no_grad;
    for (const Tensor& t : local->parameters()) t.fill_(0.25 * rank);
    for (const Tensor& t : local->buffers())
      if (t.dtype() == c.dtype) t.fill_(3.0 * rank);
  }
  return {net, local};
}

// Four Adam steps on a global batch of 12 (each rank takes its contiguous
// share): DDP on this rank vs the reference on the whole batch. BatchNorm
// normalises each rank's share with that share's statistics, so with it the
// reference runs its forward share by share. With micro_batches = m, each
// step accumulates m batches (loss / m each), as gradient accumulation does.
inline void check_ddp_matches_single_device(const std::shared_ptr<ProcessGroup>& group, nn::ModulePtr reference,
                                            nn::ModulePtr local, const DdpCase& c) {
  namespace F = nn::functional;
  const int rank = group->rank(), world = group->size();
  const int64_t batch = 12, share = batch / world;
  DistributedDataParallel ddp(local, group, {.gradient_as_bucket_view = c.gradient_as_bucket_view});
  optim::Adam opt_reference(reference->parameters(), {.lr = 1e-2});
  optim::Adam opt_ddp(ddp->parameters(), {.lr = 1e-2});

  Generator gen(99);  // the same batches on every rank
  for (int step = 0; step < 4; ++step) {
    opt_reference.zero_grad();
    opt_ddp.zero_grad(/*set_to_none=*/!c.zero_grad_in_place);
    for (int m = 0; m < c.micro_batches; ++m) {
      Tensor x = randn({batch, 2, 6, 6}, {.dtype = c.dtype}, &gen).to(c.device);
      Tensor y = randint(0, 3, {batch}, {.dtype = kInt64}, &gen).to(c.device);

      Tensor logits;
      if (c.batch_norm) {
        TensorList parts;
        for (const Tensor& s : chunk(x, world, 0)) parts.push_back(reference->forward(s));
        logits = cat(parts, 0);
      } else {
        logits = reference->forward(x);
      }
      (F::cross_entropy(logits, y) / c.micro_batches).backward();

      auto local_backward = [&] {
        Tensor out = ddp->forward(x.narrow(0, rank * share, share));
        (F::cross_entropy(out, y.narrow(0, rank * share, share)) / c.micro_batches).backward();
      };
      if (m + 1 < c.micro_batches) {
        auto guard = ddp->no_sync();
        local_backward();
      } else {
        local_backward();
      }
    }
    opt_reference.step();
    opt_ddp.step();
    EXPECT_LT(max_param_difference(*reference, *ddp->module()), c.tolerance) << "rank " << rank << ", step " << step;
  }
  EXPECT_EQ(ddp->reducer().stats().synced_backwards, 4) << "one synchronised backward per step";
  if (c.gradient_as_bucket_view) {
    // Every gradient lives in its bucket's flat tensor.
    const Reducer& reducer = ddp->reducer();
    for (size_t b = 0; b < reducer.buckets().size(); ++b)
      for (size_t k : reducer.buckets()[b]) {
        const Tensor grad = ddp->module()->parameters()[k].grad(), flat = reducer.bucket_tensors()[b];
        EXPECT_TRUE(grad.defined() && grad.storage().get() == flat.storage().get()) << "parameter " << k;
      }
  }
}

// Ranks build models whose parameter shapes differ (rank 1's first layer
// takes one more input): construction fails on every rank, naming it.
inline void check_ddp_rejects_different_models(const std::shared_ptr<ProcessGroup>& group) {
  nn::Sequential net(nn::Linear(group->rank() == 1 ? 5 : 4, 3), nn::Tanh(), nn::Linear(3, 2));
  EXPECT_THROW_MSG(DistributedDataParallel(net, group),
                   "parameter 0 ('0.weight' here) is [3, 5] float32 on rank 1 but [3, 4] float32 on rank 0");
}

// The average of the ranks' gradients as the 16-bit all-reduce computes it on
// the threads backend (and on MPI with two ranks, where the one rounding of
// the sum, then halving, is the same): each rank's gradient rounded to
// `dtype`, summed in float32 in rank order, divided by the rank count in
// float32 and rounded to `dtype` once; returned widened to float32.
inline Tensor compressed_average(const TensorList& rank_grads, DType dtype) {
  const size_t n = rank_grads.size();
  std::vector<std::vector<float>> g;
  for (const Tensor& t : rank_grads) g.push_back(t.to(dtype).to(kFloat32).to_vector<float>());
  std::vector<float> avg(g[0].size());
  for (size_t i = 0; i < avg.size(); ++i) {
    float sum = g[0][i];
    for (size_t r = 1; r < n; ++r) sum += g[r][i];
    avg[i] = sum / static_cast<float>(n);
  }
  return from_vector<float>(avg, rank_grads[0].shape()).to(dtype).to(kFloat32);
}

// DDP with compress_hook(dtype) against the reference trained on gradients
// averaged as compressed_average does: four SGD steps, each rank's share of
// a batch of 12. (SGD, not Adam: Adam's step is about lr for any gradient
// far above its epsilon, so a gradient near 0 rounded the other way moves a
// parameter by a whole lr, where SGD moves it by lr times the rounding.) The reference computes each share's gradient by itself (the
// same computation as that rank's), then sets the compressed average as its
// gradient. `tolerance` 0 asks for the same parameters bit for bit.
inline void check_compressed_ddp_matches_rounded_reference(const std::shared_ptr<ProcessGroup>& group,
                                                           nn::ModulePtr reference, nn::ModulePtr local, DType dtype,
                                                           double tolerance) {
  namespace F = nn::functional;
  const int rank = group->rank(), world = group->size();
  const int64_t batch = 12, share = batch / world;
  DistributedDataParallel ddp(local, group);
  ddp->register_comm_hook(compress_hook(dtype));
  optim::SGD opt_reference(reference->parameters(), {.lr = 0.1});
  optim::SGD opt_ddp(ddp->parameters(), {.lr = 0.1});
  const TensorList params = reference->parameters();
  double rounding_effect = 0;  // how far the rounded average is from the exact one

  Generator gen(99);  // the same batches on every rank
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn({batch, 2, 6, 6}, {}, &gen);
    Tensor y = randint(0, 3, {batch}, {.dtype = kInt64}, &gen);
    std::vector<TensorList> share_grads(params.size());  // [parameter][rank]
    for (int r = 0; r < world; ++r) {
      opt_reference.zero_grad();
      F::cross_entropy(reference->forward(x.narrow(0, r * share, share)), y.narrow(0, r * share, share)).backward();
      for (size_t k = 0; k < params.size(); ++k) share_grads[k].push_back(params[k].grad().clone());
    }
    for (size_t k = 0; k < params.size(); ++k) {
      const Tensor average = compressed_average(share_grads[k], dtype);
      rounding_effect = std::max(rounding_effect,
                                 loom::testing::max_rel_error(average, stack(share_grads[k], 0).mean({0})));
      params[k].set_grad(average);
    }
    opt_reference.step();

    opt_ddp.zero_grad();
    F::cross_entropy(ddp->forward(x.narrow(0, rank * share, share)), y.narrow(0, rank * share, share)).backward();
    opt_ddp.step();
    EXPECT_LE(max_param_difference(*reference, *ddp->module()), tolerance) << "rank " << rank << ", step " << step;
  }
  // The check can tell: rounding moved the gradients by far more than it allows.
  EXPECT_GT(rounding_effect, 1e-4);
  // Each rank sent 16-bit buckets: half the float32 gradient's bytes.
  const ReducerStats stats = ddp->reducer().stats();
  EXPECT_EQ(stats.bytes, 4 * static_cast<int64_t>(ddp->module()->num_parameters() * element_size(dtype)));
}

}  // namespace loom::parallel::testing
