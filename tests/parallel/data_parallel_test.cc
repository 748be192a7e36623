// DataParallel must train exactly like one device on the same global batch.
#include "parallel/data_parallel.h"

#include <gtest/gtest.h>

#include "nn/nn.h"
#include "optim/optimizer.h"
#include "tensor/autocast.h"
#include "tests/parallel/equivalence.h"
#include "tests/test_util.h"

namespace loom {
namespace {

namespace F = nn::functional;
using parallel::testing::make_net;
using parallel::testing::max_param_difference;

// k steps of Adam on the same batches: single device vs DataParallel over
// `replicas` copies of `device`; the parameters must agree after every step.
// BatchNorm normalises each replica's shard with the shard's statistics (as
// in PyTorch), so with it the single-device reference normalises the same
// shards: its forward runs shard by shard on the one device.
void expect_equivalent(int replicas, DType dtype, bool batch_norm, double tolerance,
                       Device device = Device::cpu()) {
  manual_seed(7);
  nn::Sequential single = make_net(batch_norm);
  single->to(dtype);
  single->to(device);
  nn::ModulePtr copy = single->clone();
  parallel::DataParallel dp(copy, std::vector<Device>(replicas, device));
  optim::Adam opt_single(single->parameters(), {.lr = 1e-2});
  optim::Adam opt_dp(dp->parameters(), {.lr = 1e-2});

  Generator gen(99);
  for (int step = 0; step < 4; ++step) {
    const int64_t batch = 12 + step;  // also batches that do not split evenly
    Tensor x = randn({batch, 2, 6, 6}, {.dtype = dtype}, &gen).to(device);
    Tensor y = randint(0, 3, {batch}, {.dtype = kInt64}, &gen).to(device);

    Tensor logits;
    if (batch_norm) {
      TensorList parts;
      for (const Tensor& shard : chunk(x, replicas, 0)) parts.push_back(single->forward(shard));
      logits = cat(parts, 0);
    } else {
      logits = single->forward(x);
    }
    opt_single.zero_grad();
    F::cross_entropy(logits, y).backward();
    opt_single.step();

    opt_dp.zero_grad();
    F::cross_entropy(dp->forward(x), y).backward();
    opt_dp.step();

    EXPECT_LT(max_param_difference(*single, *dp->module()), tolerance) << "step " << step;
  }
}

// The tolerance: DataParallel adds the same gradient terms in a different
// order (per shard, then across replicas), so results differ by rounding
// only. A few ulps per step, carried through Adam's normalised update over
// four steps: about 1e-6 relative in float32 (bound 1e-5), and 1e-11 in
// float64 (bound 1e-10). A wrong gradient (a replica dropped, counted twice,
// or stale parameters) differs by 1e-2 or more.
TEST(DataParallel, TwoReplicasFloat64) { expect_equivalent(2, kFloat64, false, 1e-10); }
TEST(DataParallel, ThreeReplicasFloat64) { expect_equivalent(3, kFloat64, false, 1e-10); }
TEST(DataParallel, TwoReplicasFloat32) { expect_equivalent(2, kFloat32, false, 1e-5); }
TEST(DataParallel, ThreeReplicasFloat32) { expect_equivalent(3, kFloat32, false, 1e-5); }
TEST(DataParallel, BatchNormThreeReplicas) { expect_equivalent(3, kFloat64, true, 1e-10); }
// One GPU, repeated: the replicas share it, each on a queue (stream) of its own.
TEST(DataParallelCuda, TwoReplicasOnOneGpuFloat64) {
  LOOM_REQUIRE_CUDA();
  expect_equivalent(2, kFloat64, false, 1e-10, Device::cuda(0));
}
TEST(DataParallelCuda, BatchNormThreeReplicasOnOneGpu) {
  LOOM_REQUIRE_CUDA();
  expect_equivalent(3, kFloat64, true, 1e-10, Device::cuda(0));
}

TEST(DataParallel, InputGradientMatchesSingleDevice) {
  manual_seed(3);
  nn::Sequential net(nn::Linear(5, 4), nn::Tanh(), nn::Linear(4, 2));
  nn::ModulePtr copy = net->clone();
  parallel::DataParallel dp(copy, {Device::cpu(), Device::cpu(), Device::cpu()});
  Tensor x1 = randn({7, 5}).requires_grad_();
  Tensor x2 = x1.detach().clone().requires_grad_();
  net->forward(x1).square().sum().backward();
  dp->forward(x2).square().sum().backward();
  testing::expect_values(x2.grad(), testing::values(x1.grad()), 1e-5);
}

// The replicas run in worker threads, and autocast is per thread: they must
// run under the caller's (they ran in float32, the output came back float32).
TEST(DataParallel, ReplicasRunUnderTheCallersAutocast) {
  manual_seed(4);
  nn::Sequential net(nn::Linear(5, 4), nn::Tanh(), nn::Linear(4, 2));
  nn::ModulePtr copy = net->clone();
  parallel::DataParallel dp(copy, {Device::cpu(), Device::cpu(), Device::cpu()});
  const Tensor x = randn({7, 5});
  Tensor expected, got;
  {
    AutocastGuard autocast(kBFloat16);
    expected = net->forward(x);
    got = dp->forward(x);
  }
  EXPECT_EQ(expected.dtype(), kBFloat16);
  EXPECT_EQ(got.dtype(), kBFloat16);
  testing::expect_values(got, testing::values(expected), 1e-2);
  got.to(kFloat32).sum().backward();
  EXPECT_EQ(dp->parameters()[0].grad().dtype(), kFloat32);
}

TEST(DataParallel, SmallBatchUsesFewerReplicasAndErrorsPropagate) {
  nn::Linear fc(3, 2);
  parallel::DataParallel dp(fc, {Device::cpu(), Device::cpu(), Device::cpu()});
  EXPECT_EQ(dp->forward(randn({2, 3})).shape(), (Shape{2, 2}));
  EXPECT_THROW_MSG(dp->forward(randn({6, 4})), "linear: input of shape [2, 4] does not end in the weight's in_features 3");
  EXPECT_EQ(dp->named_parameters()[0].first, "module.weight");
}

}  // namespace
}  // namespace loom
