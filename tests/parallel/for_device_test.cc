// Which GPU a rank uses and which group moves its tensors, decided without a
// GPU: the local-rank mapping (the launcher's environment set here), the
// transport from where the ranks live, and for_device's choice over threads.
#include "parallel/comm/for_device.h"

#include <cstdlib>

#include "parallel/comm/thread_group.h"
#include "tests/parallel/thread_ranks.h"
#include "tests/test_util.h"

namespace loom::parallel::testing {
namespace {

TEST(ForDevice, CudaMeansTheLocalRanksGpu) {
  EXPECT_EQ(choose_device("cuda", 0, 8).device, Device::cuda(0));
  EXPECT_EQ(choose_device("cuda", 5, 8).device, Device::cuda(5));
  EXPECT_EQ(choose_device("cuda", 5, 8).note, "");
  // More local ranks than GPUs: they share, and say so.
  const DeviceChoice shared = choose_device("cuda", 3, 2);
  EXPECT_EQ(shared.device, Device::cuda(1));
  EXPECT_EQ(shared.note, "local rank 3 shares cuda:1 (2 GPUs for more ranks on this machine)");
  // Explicit devices are taken as given; the CPU needs no GPU.
  EXPECT_EQ(choose_device("cuda:3", 0, 8).device, Device::cuda(3));
  EXPECT_EQ(choose_device("cpu", 4, 0).device, Device::cpu());
  EXPECT_THROW_MSG(choose_device("cuda", 0, 0), "--device cuda: this machine has no usable GPU");
  EXPECT_THROW_MSG(choose_device("gpu", 0, 1), "invalid device 'gpu'");
}

TEST(ForDevice, LocalRankComesFromTheLauncher) {
  ASSERT_EQ(setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1), 0);
  EXPECT_EQ(device_for_rank("cpu").device, Device::cpu());
  if (cuda_device_count() >= 2) {
    EXPECT_EQ(device_for_rank("cuda").device, Device::cuda(1));
  }
  ASSERT_EQ(unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"), 0);
  ASSERT_EQ(setenv("SLURM_LOCALID", "0", 1), 0);  // srun's name for it
  if (cuda_device_count() >= 1) {
    EXPECT_EQ(device_for_rank("cuda").device, Device::cuda(0));
  }
  ASSERT_EQ(unsetenv("SLURM_LOCALID"), 0);
}

TEST(ForDevice, NcclWhenEveryRankHasItsOwnGpu) {
  const Device gpu = Device::cuda(0);
  EXPECT_EQ(choose_transport(gpu, {"a/cuda:0", "a/cuda:1", "b/cuda:0", "b/cuda:1"}), Transport::Nccl);
  EXPECT_EQ(choose_transport(gpu, {"a/cuda:0", "a/cuda:0"}), Transport::HostStaging);  // NCCL would refuse
  EXPECT_EQ(choose_transport(gpu, {"a/cuda:0", "b/cuda:0", "b/cuda:0"}), Transport::HostStaging);
  EXPECT_EQ(choose_transport(gpu, {"a/cuda:0"}), Transport::Nccl);  // one rank still moves CUDA tensors
  EXPECT_EQ(choose_transport(Device::cpu(), {"a/cpu", "a/cpu"}), Transport::Direct);
  EXPECT_STREQ(transport_name(Transport::HostStaging), "host staging");
}

// Over threads (one host): CPU tensors need nothing; ranks sharing cuda:0 get
// host staging (deciding touches no GPU). A single rank on a GPU gets NCCL:
// its own group moves only CPU tensors, and DDP, ZeRO, FSDP and tensor
// parallelism issue collectives at any size (without a GPU, NCCL says so).
TEST(ForDevice, PicksTheGroupForTheDevice) {
  auto one = ThreadGroup::create(1, test_options())[0];
  EXPECT_EQ(for_device(one, Device::cpu()).get(), one.get());
  if (cuda_device_count() == 0)
    EXPECT_THROW_MSG(for_device(one, Device::cuda(0)), "NcclGroup");
  else
    EXPECT_EQ(for_device(one, Device::cuda(0))->backend(), "nccl");
  run_rank_threads(2, [](int, const std::shared_ptr<ProcessGroup>& group) {
    EXPECT_EQ(for_device(group, Device::cpu()).get(), group.get());
    EXPECT_EQ(for_device(group, Device::cuda(0))->backend(), "threads+host-staging");
  });
}

}  // namespace
}  // namespace loom::parallel::testing
