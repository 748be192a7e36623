// Which GPU a rank uses, and which group moves its tensors — the choices
// torchrun and torch.distributed make for a PyTorch program.
//
//   auto world = parallel::init(argc, argv);
//   parallel::DeviceChoice choice = parallel::device_for_rank("cuda");  // cuda:<local rank>
//   if (!choice.note.empty()) std::printf("%s\n", choice.note.c_str()); // e.g. ranks share a GPU
//   auto group = parallel::for_device(world, choice.device);           // NCCL, host staging, or world
//
// for_device: for CPU tensors, the group itself. For CUDA tensors the ranks
// compare where they run (host name and GPU, over `group`): NCCL when every
// rank has a GPU of its own (a single rank too: the threads and MPI groups
// move only CPU tensors), host staging (host_staged_group.h) when some share
// one, which NCCL refuses. Every rank calls it (a collective over `group` when
// the device is a GPU), and all of them make the same choice. The group it
// returns takes over `group`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

struct DeviceChoice {
  Device device;
  std::string note;  // why it is not the obvious choice ("" when it is)
};

// "cpu", "cuda:N" (as given), or "cuda": the local rank's GPU, local rank
// modulo the GPU count — ranks share GPUs when they outnumber them, and the
// note says so.
DeviceChoice choose_device(const std::string& spec, int local_rank, int gpu_count);
// The same for this process: its local rank from the launcher (local_rank())
// and this machine's GPUs.
DeviceChoice device_for_rank(const std::string& spec);

enum class Transport { Direct, Nccl, HostStaging };
const char* transport_name(Transport transport);  // "direct", "nccl", "host staging"
// From where each rank's tensors live ("host/cuda:0", one per rank).
Transport choose_transport(Device device, const std::vector<std::string>& places);

std::shared_ptr<ProcessGroup> for_device(std::shared_ptr<ProcessGroup> group, Device device);

}  // namespace loom::parallel
