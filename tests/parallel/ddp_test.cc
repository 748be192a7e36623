// DistributedDataParallel with the threads backend: ranks are threads of this
// process, each with its own model, optimizer and autograd tape.
#include <gtest/gtest.h>

#include <map>

#include "parallel/comm/thread_group.h"
#include "parallel/ddp/distributed_data_parallel.h"
#include "parallel/trace.h"
#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel {
namespace {

namespace F = nn::functional;
using testing::DdpCase;

using Models = std::pair<nn::ModulePtr, nn::ModulePtr>;

void expect_matches_single_device(int world, DdpCase c) {
  testing::run_prepared_ranks<Models>(
      world, [&](int rank) { return testing::ddp_models(rank, c); },
      [&](const std::shared_ptr<ProcessGroup>& group, Models& models) {
        testing::check_ddp_matches_single_device(group, models.first, models.second, c);
      });
}

// Tolerances as for DataParallel (data_parallel_test.cc): averaging per-rank
// means adds the same terms in another order, a few ulps per step carried
// through four Adam steps: ~1e-6 relative in float32 (bound 1e-5), ~1e-11 in
// float64 (bound 1e-10). A lost or doubled rank's gradient is off by 1e-2.
TEST(DistributedDataParallel, TwoRanksFloat64) { expect_matches_single_device(2, {.dtype = kFloat64, .tolerance = 1e-10}); }
TEST(DistributedDataParallel, ThreeRanksFloat64) { expect_matches_single_device(3, {.dtype = kFloat64, .tolerance = 1e-10}); }
TEST(DistributedDataParallel, TwoRanksFloat32) { expect_matches_single_device(2, {.dtype = kFloat32, .tolerance = 1e-5}); }
// BatchNorm cases run in float64 with the bounds above. Their convolution
// has no bias (equivalence.h): with one, its exact gradient is zero, and
// Adam scales the rounding noise left there (1e-16 in float64, 1e-9 in
// float32) by lr / eps = 1e6, which put float64 at the bound itself (1e-10)
// and float32 anywhere. Without it the difference is about 1e-14.
TEST(DistributedDataParallel, ThreeRanksBatchNormFloat64) {
  expect_matches_single_device(3, {.dtype = kFloat64, .batch_norm = true, .tolerance = 1e-10});
}
TEST(DistributedDataParallel, ThreeRanksBatchNormFloat32) {
  expect_matches_single_device(3, {.dtype = kFloat32, .batch_norm = true, .tolerance = 1e-5});
}
TEST(DistributedDataParallel, NoSyncAccumulationThreeRanks) {
  expect_matches_single_device(3, {.dtype = kFloat64, .batch_norm = true, .micro_batches = 3, .tolerance = 1e-10});
}
// gradient_as_bucket_view: the same training, with .grad() a view into the
// bucket: gradients dropped by zero_grad() come back as views, and gradients
// zeroed in place accumulate straight into the bucket, also across no_sync.
TEST(DistributedDataParallel, GradientAsBucketViewTrainsTheSame) {
  expect_matches_single_device(2, {.dtype = kFloat64, .tolerance = 1e-10, .gradient_as_bucket_view = true});
  expect_matches_single_device(3, {.dtype = kFloat64, .batch_norm = true, .micro_batches = 3, .tolerance = 1e-10,
                                   .gradient_as_bucket_view = true, .zero_grad_in_place = true});
}
TEST(DistributedDataParallel, OneRank) { expect_matches_single_device(1, {.dtype = kFloat64, .tolerance = 1e-12}); }

TEST(DistributedDataParallel, NoSyncDoesNotCommunicate) {
  testing::run_prepared_ranks<int>(
      2, [](int) { return 0; },
      [](const std::shared_ptr<ProcessGroup>& group, int&) {
        nn::Linear fc(3, 2);
        DistributedDataParallel ddp(fc, group);
        const int64_t ops_before = group->stats().ops;
        {
          auto guard = ddp->no_sync();
          ddp->forward(randn({4, 3})).sum().backward();
        }
        EXPECT_EQ(group->stats().ops, ops_before);
        EXPECT_EQ(ddp->reducer().stats().synced_backwards, 0);
      });
}

TEST(DistributedDataParallel, RejectsDifferentModels) {
  testing::run_prepared_ranks<int>(
      2, [](int) { return 0; },
      [](const std::shared_ptr<ProcessGroup>& group, int&) { testing::check_ddp_rejects_different_models(group); });
}

// Rank 0's model uses head a, rank 1's head b: each head gets a gradient on
// one rank only.
class TwoHeadsImpl : public nn::Module {
 public:
  explicit TwoHeadsImpl(bool use_b) : Module("TwoHeads"), use_b_(use_b) {
    a_ = register_module("a", nn::Linear(3, 2));
    b_ = register_module("b", nn::Linear(3, 2));
  }
  Tensor forward(const Tensor& x) override { return use_b_ ? b_->forward(x) : a_->forward(x); }

 private:
  bool use_b_;
  nn::Linear a_{nullptr}, b_{nullptr};
};

struct TwoHeadsModels {
  std::shared_ptr<TwoHeadsImpl> local, reference;
};

TwoHeadsModels two_heads(int rank) {
  manual_seed(5);
  auto reference = std::make_shared<TwoHeadsImpl>(false);
  auto local = std::make_shared<TwoHeadsImpl>(rank == 1);
  local->load_state_dict(reference->state_dict());
  return {local, reference};
}

TEST(DistributedDataParallel, UnusedParametersAreNamed) {
  testing::run_prepared_ranks<TwoHeadsModels>(2, two_heads, [](const std::shared_ptr<ProcessGroup>& group, TwoHeadsModels& m) {
    DistributedDataParallel ddp(m.local, group);
    const char* unused = group->rank() == 0 ? "'b.weight', 'b.bias'" : "'a.weight', 'a.bias'";
    EXPECT_THROW_MSG(ddp->forward(randn({4, 3})).sum().backward(), unused);
  });
}

// With find_unused_parameters each head's gradient is its one rank's
// gradient over the world size (the other rank contributes zero).
TEST(DistributedDataParallel, FindUnusedParametersAveragesWithZeros) {
  testing::run_prepared_ranks<TwoHeadsModels>(2, two_heads, [](const std::shared_ptr<ProcessGroup>& group, TwoHeadsModels& m) {
    DistributedDataParallel ddp(m.local, group,
                                {.find_unused_parameters = true});
    Generator gen(3);
    Tensor x0 = randn({4, 3}, {}, &gen), x1 = randn({4, 3}, {}, &gen);
    ddp->forward(group->rank() == 0 ? x0 : x1).square().sum().backward();

    // Reference: head a on rank 0's input, head b on rank 1's.
    auto named = m.reference->named_children();
    nn::ModulePtr a = named[0].second, b = named[1].second;
    a->forward(x0).square().sum().backward();
    b->forward(x1).square().sum().backward();
    const auto local = m.local->named_parameters(), reference = m.reference->named_parameters();
    for (size_t k = 0; k < local.size(); ++k)
      loom::testing::expect_values(local[k].second.grad(), loom::testing::values(reference[k].second.grad() / 2), 1e-6);
  });
}

// Backward meets the last layer first, so with one bucket per parameter the
// first all-reduce is issued while most gradients are still to come; with
// one big bucket it waits for all of them.
TEST(DistributedDataParallel, SmallBucketsStartAllReduceDuringBackward) {
  for (int64_t cap : {int64_t{1}, int64_t{25} << 20})
    testing::run_prepared_ranks<int>(
        2, [](int) { return 0; },
        [cap](const std::shared_ptr<ProcessGroup>& group, int&) {
          nn::Sequential net(nn::Linear(8, 8), nn::Tanh(), nn::Linear(8, 8), nn::Tanh(), nn::Linear(8, 2));
          DistributedDataParallel ddp(net, group, {.bucket_cap_bytes = cap});
          ddp->forward(randn({4, 8})).sum().backward();
          const std::vector<int>& pending = ddp->reducer().pending_at_launch();
          if (cap == 1) {
            ASSERT_EQ(pending.size(), 6u);
            EXPECT_GT(pending.front(), 0) << "the first bucket waited for every gradient";
            EXPECT_EQ(pending.back(), 0);
          } else {
            EXPECT_EQ(pending, std::vector<int>{0});
          }
        });
}

// In eval mode BatchNorm normalises with its running statistics, so every
// rank must use rank 0's: forward broadcasts them.
TEST(DistributedDataParallel, ForwardBroadcastsRankZerosBuffers) {
  testing::run_prepared_ranks<int>(
      2, [](int) { return 0; },
      [](const std::shared_ptr<ProcessGroup>& group, int&) {
        nn::Sequential net(nn::BatchNorm2d(2));
        DistributedDataParallel ddp(net, group);
        ddp->eval();
        const Tensor running_mean = net->buffers()[0];
        running_mean.fill_(group->rank() == 0 ? 1.5 : -4.0);  // ranks drift apart
        ddp->forward(randn({2, 2, 3, 3}));
        loom::testing::expect_values(running_mean, {1.5, 1.5}, 0);
      });
}

TEST(DistributedDataParallel, TraceShowsEachBucketsAllReduce) {
  trace::clear();
  trace::enable(true);
  testing::run_prepared_ranks<int>(
      2, [](int) { return 0; },
      [](const std::shared_ptr<ProcessGroup>& group, int&) {
        nn::Sequential net(nn::Linear(4, 4), nn::Tanh(), nn::Linear(4, 2));
        DistributedDataParallel ddp(net, group, {.bucket_cap_bytes = 40});
        ddp->forward(randn({3, 4})).sum().backward();
      });
  trace::enable(false);
  // The process group records every operation on its rank's lane.
  std::map<int, int> spans;  // lane -> all-reduces
  for (const trace::Event& e : trace::events())
    if (e.category == "communication" && e.name == "all_reduce") {
      ++spans[e.lane];
      EXPECT_LE(e.begin_us, e.end_us);
    }
  // Buckets of <= 40 bytes: [2.bias 8 B, 2.weight 32 B], [0.bias 16 B], [0.weight 64 B]: 3 per rank.
  EXPECT_EQ(spans, (std::map<int, int>{{trace::lane("rank0/comm"), 3}, {trace::lane("rank1/comm"), 3}}));
  trace::clear();
}

TEST(DistributedDataParallel, HooksOutliveTheWrapperHarmlessly) {
  testing::run_prepared_ranks<int>(
      1, [](int) { return 0; },
      [](const std::shared_ptr<ProcessGroup>& group, int&) {
        nn::Linear fc(3, 2);
        { DistributedDataParallel ddp(fc, group); }
        fc->forward(randn({2, 3})).sum().backward();  // the hooks find no Reducer
        EXPECT_TRUE(fc->weight.grad().defined());
      });
}

// The compression hook: the ranks' gradients averaged in 16 bits, which the
// reference reproduces (compressed_average), so the parameters agree exactly.
TEST(DistributedDataParallel, CompressedGradientsMatchTheRoundedAverage) {
  for (DType dtype : {kBFloat16, kFloat16})
    for (int world : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << dtype << ", " << world << " ranks");
      const DdpCase c{.dtype = kFloat32};
      testing::run_prepared_ranks<Models>(
          world, [&](int rank) { return testing::ddp_models(rank, c); },
          [&](const std::shared_ptr<ProcessGroup>& group, Models& models) {
            testing::check_compressed_ddp_matches_rounded_reference(group, models.first, models.second, dtype, 0);
          });
    }
}

TEST(DistributedDataParallel, CommHookArguments) {
  EXPECT_THROW_MSG(compress_hook(kFloat32), "compress_hook: gradients compress to bfloat16 or float16, not float32");
  testing::run_rank_threads(1, [](int, const std::shared_ptr<ProcessGroup>& group) {
    DistributedDataParallel ddp(nn::Linear(2, 2), group);
    EXPECT_EQ(ddp->reducer().comm_hook().name(), "allreduce");
    EXPECT_THROW_MSG(ddp->register_comm_hook(nullptr), "register_comm_hook got no hook");
    ddp->register_comm_hook(compress_hook(kBFloat16));
    EXPECT_EQ(ddp->reducer().comm_hook().name(), "bfloat16 compression");
  });
}

TEST(BucketPlan, ReverseOrderCapAndDtype) {
  TensorList params{zeros({4}), zeros({2}), zeros({3}), zeros({10}), zeros({1}, {.dtype = kFloat64}), zeros({1})};
  // float32: 16, 8, 12, 40 bytes; the float64 parameter breaks a bucket.
  std::vector<Bucket> plan = plan_buckets(params, 24);
  EXPECT_EQ(plan, (std::vector<Bucket>{{5}, {4}, {3}, {2, 1}, {0}}));
  EXPECT_EQ(plan_buckets(params, 1 << 20), (std::vector<Bucket>{{5}, {4}, {3, 2, 1, 0}}));
  EXPECT_THROW_MSG(plan_buckets(params, 0), "bucket_cap_bytes must be positive");
}

}  // namespace
}  // namespace loom::parallel
