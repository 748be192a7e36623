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

}  // namespace loom::parallel::testing
