// NcclGroup on GPUs, ranks as threads with one GPU each (these tests skip,
// saying why, where there are too few GPUs; nccl_mpi_test runs processes):
// every operation gives the CPU's result, CPU tensors pass through, wait()
// never blocks the host, ranks may both send first, mismatches are errors on
// every rank, DDP over NCCL trains as one device, and a rank that stops
// taking part makes the others' operations fail by the timeout, not hang.
#include "parallel/comm/nccl_group.h"

#include "parallel/comm/for_device.h"
#include "tensor/cuda/stream.h"
#include "tests/parallel/collective_checks.h"
#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/sharding_checks.h"
#include "tests/parallel/staging_checks.h"
#include "tests/parallel/tensor_parallel_checks.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {
namespace {

#define REQUIRE_GPUS(n)                                                                                       \
  do {                                                                                                        \
    if (cuda_device_count() < (n))                                                                            \
      GTEST_SKIP() << "needs " << (n) << " GPUs (one per rank: NCCL refuses two ranks on one GPU); this machine " \
                   << "has " << cuda_device_count();                                                          \
  } while (0)

// body(rank's NCCL group, rank's GPU) on n ranks as threads, rank r on cuda:r.
void run_nccl(int n, const std::function<void(ProcessGroup&, Device)>& body,
              ProcessGroupOptions options = test_options()) {
  run_rank_threads(
      n,
      [&](int r, const std::shared_ptr<ProcessGroup>& bootstrap) {
        std::shared_ptr<ProcessGroup> nccl = NcclGroup::create(bootstrap, Device::cuda(r));
        body(*nccl, Device::cuda(r));
      },
      options);
}

TEST(Nccl, OneRankOnOneGpuGivesTheCpuResults) {
  REQUIRE_GPUS(1);
  run_nccl(1, [](ProcessGroup& pg, Device d) {
    EXPECT_EQ(pg.backend(), "nccl");
    check_cuda_matches_cpu(pg, d);
    check_in_place(pg, d);
  });
}

TEST(Nccl, EveryRankCountTheGpusAllowGivesTheCpuResults) {
  REQUIRE_GPUS(2);
  for (int n = 2; n <= cuda_device_count(); ++n)
    run_nccl(n, [](ProcessGroup& pg, Device d) {
      check_cuda_matches_cpu(pg, d);
      check_in_place(pg, d);
    });
}

// CPU tensors go through the bootstrap group: the threads backend's own checks pass.
TEST(Nccl, CpuTensorsPassThrough) {
  REQUIRE_GPUS(1);
  run_nccl(1, [](ProcessGroup& pg, Device) {
    check_all_reduce(pg);
    check_broadcast(pg);
    check_all_gather(pg);
    check_reduce_scatter(pg);
    check_in_order_completion(pg);
  });
}

// A CUDA operation with a tensor elsewhere fails by its own name (not from
// record_stream inside the issuing call), and the group goes on.
TEST(Nccl, ATensorOnAnotherDeviceFailsItsOperation) {
  REQUIRE_GPUS(1);
  run_nccl(1, [](ProcessGroup& pg, Device d) {
    std::vector<Tensor> on_cpu = {zeros({4})};
    WorkPtr work = pg.all_gather(on_cpu, ones({4}, {.device = d}));
    EXPECT_THROW_MSG(work->wait(), "all_gather #1");
    EXPECT_THROW_MSG(work->wait(), "needs all of an operation's tensors on one device; got cuda:0 and cpu");
    Tensor x = ones({4}, {.device = d});
    pg.all_reduce(x)->wait();
    loom::testing::expect_values(x.to(Device::cpu()), {1, 1, 1, 1});
  });
}

// wait() only orders the waiting stream after the collective: with GPU work
// queued ahead of it, the stream is still busy when wait() returns.
TEST(Nccl, WaitNeverBlocksTheHost) {
  REQUIRE_GPUS(1);
  run_nccl(1, [](ProcessGroup& pg, Device d) {
    // The communicator joins first (NCCL's setup can take longer than the
    // work below), so that the wait() under test measures only the enqueue.
    Tensor x = full({1 << 20}, 1.0, {.device = d});
    pg.all_reduce(x)->wait();
    synchronize(d);
    Tensor a = randn({4096, 4096}, {.device = d}), acc = zeros({4096, 4096}, {.device = d});
    for (int i = 0; i < 50; ++i) acc.add_(a.matmul(a));  // ~7 TFLOP queued: ~0.1 s of exact FP32 on an H100
    pg.all_reduce(x)->wait();
    EXPECT_FALSE(cuda::current_stream(d.index()).query()) << "wait() returned only after the GPU caught up";
    loom::testing::expect_values(x.narrow(0, 0, 3).to(Device::cpu()), {1, 1, 1});
  });
}

// Both ranks send 64 MiB before they receive, with tags in different orders:
// a single NCCL stream would deadlock on this; channels per direction do not.
TEST(Nccl, RanksMayBothSendFirstInAnyTagOrder) {
  REQUIRE_GPUS(2);
  run_nccl(2, [](ProcessGroup& pg, Device d) {
    const int r = pg.rank(), peer = 1 - r;
    Tensor a = full({16 << 20}, r + 1.0, {.device = d}), b = full({1000}, r + 10.0, {.device = d});
    Tensor got_a = zeros({16 << 20}, {.device = d}), got_b = zeros({1000}, {.device = d});
    WorkPtr s1 = pg.send(a, peer, 1), s2 = pg.send(b, peer, 2);
    pg.recv(got_b, peer, 2)->wait();  // tag 2 first, though tag 1 was sent first
    pg.recv(got_a, peer, 1)->wait();
    s1->wait();
    s2->wait();
    EXPECT_EQ(got_a.max().item(), peer + 1.0);
    EXPECT_EQ(got_b.min().item(), peer + 10.0);
  });
}

TEST(Nccl, MismatchesAreErrorsOnEveryRankAndTheGroupGoesOn) {
  REQUIRE_GPUS(2);
  run_nccl(2, [](ProcessGroup& pg, Device d) {
    const int r = pg.rank();
    Tensor x = zeros({r == 0 ? 4 : 5}, {.device = d});
    EXPECT_THROW_MSG(pg.all_reduce(x)->wait(), "the ranks disagree on the number of elements: 4 on rank 0; 5 on rank 1");
    Tensor m = zeros({r == 0 ? 4 : 5}, {.device = d});
    if (r == 0) EXPECT_THROW_MSG(pg.send(m, 1, 7)->wait(), "rank 1 receives 5 x float32, but this send has 4 x float32");
    if (r == 1) EXPECT_THROW_MSG(pg.recv(m, 0, 7)->wait(), "rank 0 sent 4 x float32, but this recv expects 5 x float32");
    Tensor ok = full({3}, r + 1.0, {.device = d});
    pg.all_reduce(ok)->wait();
    EXPECT_EQ(ok.sum().item(), 9.0);
  });
}

TEST(Nccl, DdpMatchesOneDevice) {
  REQUIRE_GPUS(1);
  for (int world = 1; world <= std::min(cuda_device_count(), 3); ++world) {
    run_prepared_ranks<std::pair<nn::ModulePtr, nn::ModulePtr>>(
        world,
        [](int rank) {
          return ddp_models(rank, {.dtype = kFloat64, .batch_norm = true, .micro_batches = 2, .tolerance = 1e-10,
                                   .device = Device::cuda(rank)});
        },
        [&](const std::shared_ptr<ProcessGroup>& bootstrap, std::pair<nn::ModulePtr, nn::ModulePtr>& models) {
          const Device d = Device::cuda(bootstrap->rank());
          check_ddp_matches_single_device(NcclGroup::create(bootstrap, d), models.first, models.second,
                                          {.dtype = kFloat64, .batch_norm = true, .micro_batches = 2,
                                           .tolerance = 1e-10, .device = d});
        });
  }
}

// ZeRO-1/2 (several buckets) and FSDP (layers as units, nested units, with
// and without prefetch, accumulation) on GPUs against one device, each rank's
// group from for_device as a program gets it: NCCL, a communicator of one
// for a single rank (which once got the threads group, refusing CUDA tensors).
// FSDP gathers through an alias of a released storage and frees each unit
// while its kernels may still be queued: here that runs on a GPU.
TEST(Nccl, ShardedStrategiesMatchOneDevice) {
  REQUIRE_GPUS(1);
  using Models = std::pair<nn::ModulePtr, nn::ModulePtr>;
  auto nccl_for = [](const std::shared_ptr<ProcessGroup>& bootstrap) {
    std::shared_ptr<ProcessGroup> group = for_device(bootstrap, Device::cuda(bootstrap->rank()));
    EXPECT_EQ(group->backend(), "nccl");
    return group;
  };
  for (int world = 1; world <= std::min(cuda_device_count(), 3); ++world) {
    for (int stage : {1, 2})
      run_prepared_ranks<Models>(
          world, [](int rank) { return sharded_models(rank, Device::cuda(rank)); },
          [&](const std::shared_ptr<ProcessGroup>& bootstrap, Models& models) {
            check_zero_matches_single_device(nccl_for(bootstrap), models.first, models.second,
                                             {.stage = stage, .bucket_cap_bytes = 4096,
                                              .device = Device::cuda(bootstrap->rank())});
          });
    for (FsdpCase c : {FsdpCase{.units = Units::Layers}, FsdpCase{.units = Units::Nested, .prefetch = false},
                       FsdpCase{.units = Units::Whole, .micro_batches = 2}})
      run_prepared_ranks<Models>(
          world, [&](int rank) { return fsdp_models(rank, c.units, Device::cuda(rank)); },
          [&](const std::shared_ptr<ProcessGroup>& bootstrap, Models& models) {
            FsdpCase mine = c;
            mine.device = Device::cuda(bootstrap->rank());
            check_fsdp_matches_single_device(nccl_for(bootstrap), models.first, models.second, mine);
          });
  }
}

// The tensor-parallel GPT on 1, 2 or 4 GPUs (its 4 heads split) against the
// full GPT on each rank's GPU: logits, loss, clipped norm, AdamW steps, sampling.
TEST(Nccl, TensorParallelGptMatchesOneDevice) {
  REQUIRE_GPUS(1);
  for (int world : {1, 2, 4}) {
    if (world > cuda_device_count()) break;
    run_prepared_ranks<models::GPT>(
        world, [](int rank) { return full_gpt(Device::cuda(rank)); },
        [](const std::shared_ptr<ProcessGroup>& bootstrap, models::GPT& full) {
          check_tp_gpt_matches_single_device(for_device(bootstrap, Device::cuda(bootstrap->rank())), full);
        });
  }
}

// Rank 1 joins, then stops taking part: rank 0's all_reduce fails with the
// timeout error naming it, and nothing hangs (the abort ends its kernel).
TEST(Nccl, ARankThatStopsMakesTheOthersTimeOut) {
  REQUIRE_GPUS(2);
  ProcessGroupOptions options = test_options();
  options.timeout = std::chrono::seconds(3);
  options.check_consistency = false;  // straight to the GPU, where only the watchdog can tell
  run_nccl(
      2,
      [](ProcessGroup& pg, Device d) {
        Tensor x = ones({1024}, {.device = d});
        pg.all_reduce(x)->wait();  // both take part once
        if (pg.rank() == 1) return;
        pg.all_reduce(x)->wait();  // rank 1 never comes
        x.to(Device::cpu());       // the host waits for the stuck kernel, until the abort ends it
        EXPECT_THROW_MSG(pg.all_reduce(x)->wait(), "all_reduce #2 (sum, 1024 x float32): did not complete");
      },
      options);
}

}  // namespace
}  // namespace loom::parallel::testing
