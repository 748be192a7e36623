// HostStagedGroup over the threads backend. Without a GPU, its CPU path: every
// collective check passes through the staging threads unchanged and in order.
// With a GPU, CUDA tensors staged through pinned memory give the CPU results
// (ranks as threads sharing the GPU; host_staging_mpi_test runs processes).
#include "parallel/comm/host_staged_group.h"

#include "parallel/comm/thread_group.h"

#include "tests/parallel/collective_checks.h"
#include "tests/parallel/context_parallel_checks.h"
#include "tests/parallel/ddp_checks.h"
#include "tests/parallel/pipeline_checks.h"
#include "tests/parallel/sharding_checks.h"
#include "tests/parallel/staging_checks.h"
#include "tests/parallel/tensor_parallel_checks.h"
#include "tests/parallel/subgroup_checks.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {
namespace {

void run_staged(int n, const std::function<void(ProcessGroup&)>& body) {
  run_rank_threads(n, [&](int, const std::shared_ptr<ProcessGroup>& group) {
    std::shared_ptr<ProcessGroup> staged = HostStagedGroup::wrap(group);
    body(*staged);
  });
}

class HostStagedCpu : public ::testing::TestWithParam<int> {};

TEST_P(HostStagedCpu, AllReduce) { run_staged(GetParam(), check_all_reduce); }
TEST_P(HostStagedCpu, Broadcast) { run_staged(GetParam(), check_broadcast); }
TEST_P(HostStagedCpu, AllGather) { run_staged(GetParam(), check_all_gather); }
TEST_P(HostStagedCpu, ReduceScatter) { run_staged(GetParam(), check_reduce_scatter); }
TEST_P(HostStagedCpu, InPlace) { run_staged(GetParam(), [](ProcessGroup& pg) { check_in_place(pg); }); }
TEST_P(HostStagedCpu, SendRecv) { run_staged(GetParam(), check_send_recv); }
TEST_P(HostStagedCpu, InOrderCompletion) { run_staged(GetParam(), check_in_order_completion); }
TEST_P(HostStagedCpu, OverlappingOps) { run_staged(GetParam(), check_overlapping_ops); }
TEST_P(HostStagedCpu, Stats) { run_staged(GetParam(), check_stats); }
TEST_P(HostStagedCpu, Mismatches) { run_staged(GetParam(), check_mismatches); }
TEST_P(HostStagedCpu, Split) { run_staged(GetParam(), check_split); }

INSTANTIATE_TEST_SUITE_P(Ranks, HostStagedCpu, ::testing::Values(1, 2, 3));

TEST(HostStaged, NamesItsBackend) {
  run_staged(1, [](ProcessGroup& pg) { EXPECT_EQ(pg.backend(), "threads+host-staging"); });
}

TEST(HostStaged, CudaTensorsGiveTheCpuResults) {
  LOOM_REQUIRE_CUDA();
  for (int n : {1, 2, 3}) run_staged(n, check_staged_cuda_matches_cpu);
}

TEST(HostStaged, DdpOnCudaMatchesOneDevice) {
  LOOM_REQUIRE_CUDA();
  for (int world : {2, 3}) {
    DdpCase c{.dtype = kFloat64, .batch_norm = true, .micro_batches = 2, .tolerance = 1e-10,
              .device = Device::cuda(0)};
    run_prepared_ranks<std::pair<nn::ModulePtr, nn::ModulePtr>>(
        world, [&](int rank) { return ddp_models(rank, c); },
        [&](const std::shared_ptr<ProcessGroup>& group, std::pair<nn::ModulePtr, nn::ModulePtr>& models) {
          check_ddp_matches_single_device(HostStagedGroup::wrap(group), models.first, models.second, c);
        });
  }
}

// ZeRO-1/2 and FSDP with the ranks (threads) sharing cuda:0: in-place
// collectives on views of the flat tensors, and FSDP's gathers into an alias
// of a storage it releases between uses, staged through the host.
TEST(HostStaged, ShardedStrategiesOnCudaMatchOneDevice) {
  LOOM_REQUIRE_CUDA();
  using Models = std::pair<nn::ModulePtr, nn::ModulePtr>;
  const Device gpu = Device::cuda(0);
  for (int world : {2, 3}) {
    for (int stage : {1, 2})
      run_prepared_ranks<Models>(
          world, [&](int rank) { return sharded_models(rank, gpu); },
          [&](const std::shared_ptr<ProcessGroup>& group, Models& models) {
            check_zero_matches_single_device(HostStagedGroup::wrap(group), models.first, models.second,
                                             {.stage = stage, .bucket_cap_bytes = 4096, .device = gpu});
          });
    for (FsdpCase c : {FsdpCase{.units = Units::Layers, .device = gpu},
                       FsdpCase{.units = Units::Nested, .prefetch = false, .device = gpu}})
      run_prepared_ranks<Models>(
          world, [&](int rank) { return fsdp_models(rank, c.units, gpu); },
          [&](const std::shared_ptr<ProcessGroup>& group, Models& models) {
            check_fsdp_matches_single_device(HostStagedGroup::wrap(group), models.first, models.second, c);
          });
  }
}

// The tensor-parallel GPT over two ranks (threads) sharing cuda:0, with the
// tokens replicated and sharded along the sequence (all-gathers and
// reduce-scatters of CUDA tensors).
TEST(HostStaged, TensorParallelGptOnCudaMatchesOneDevice) {
  LOOM_REQUIRE_CUDA();
  for (TokenLayout tokens : {TokenLayout::kReplicated, TokenLayout::kSequenceSharded})
    run_prepared_ranks<models::GPT>(
        2, [](int) { return full_gpt(Device::cuda(0)); },
        [&](const std::shared_ptr<ProcessGroup>& group, models::GPT& full) {
          check_tp_gpt_matches_single_device(HostStagedGroup::wrap(group), full, tokens);
        });
}

// The context-parallel GPT over two ranks (threads) sharing cuda:0, each on
// half of every sequence (contiguous and zig-zag): the keys' and values'
// all-gathers and reduce-scatters of CUDA tensors through host memory.
TEST(HostStaged, ContextParallelGptOnCudaMatchesOneDevice) {
  LOOM_REQUIRE_CUDA();
  for (SequenceSplit split : {SequenceSplit::kContiguous, SequenceSplit::kZigZag})
    run_prepared_ranks<ReferenceAndCopy>(
        2, [](int) { return reference_and_copy(tp_config(), Device::cuda(0)); },
        [&](const std::shared_ptr<ProcessGroup>& group, ReferenceAndCopy& models) {
          check_cp_gpt_matches_single_device(HostStagedGroup::wrap(group), models, split);
        });
}

// The same with ring attention (the blocks' sends and receives through host
// memory, each block's attention in CUDA's fused kernels) and with Ulysses
// (its all-to-alls' sends and receives, whole sequences of half the heads).
TEST(HostStaged, RingAndAllToAllGptsOnCudaMatchOneDevice) {
  LOOM_REQUIRE_CUDA();
  for (KeyValueExchange exchange : {KeyValueExchange::kRing, KeyValueExchange::kAllToAll})
    for (SequenceSplit split : {SequenceSplit::kContiguous, SequenceSplit::kZigZag})
      run_prepared_ranks<ReferenceAndCopy>(
          2, [](int) { return reference_and_copy(tp_config(), Device::cuda(0)); },
          [&](const std::shared_ptr<ProcessGroup>& group, ReferenceAndCopy& models) {
            check_cp_gpt_matches_single_device(HostStagedGroup::wrap(group), models, split, /*reseed=*/false,
                                               exchange);
          });
}

// A pipeline over two ranks (threads) whose stages share the GPU.
TEST(HostStaged, DistributedPipelineOnCudaMatchesOneDevice) {
  LOOM_REQUIRE_CUDA();
  const PipelineCase c{.kind = ScheduleKind::OneFOneB, .boundaries = {4}, .micro_batches = 4, .batch = 10,
                       .device = Device::cuda(0)};
  run_prepared_ranks<std::pair<nn::Sequential, nn::Sequential>>(
      2, [](int) { return pipeline_models(Device::cuda(0)); },
      [&](const std::shared_ptr<ProcessGroup>& group, std::pair<nn::Sequential, nn::Sequential>& models) {
        check_pipeline_matches_single_device(HostStagedGroup::wrap(group), models.first, models.second, c);
      });
}

}  // namespace
}  // namespace loom::parallel::testing
