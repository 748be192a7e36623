#include "parallel/comm/for_device.h"

#include <unistd.h>

#include <cstring>
#include <set>

#include "parallel/comm/host_staged_group.h"
#include "parallel/comm/init.h"
#include "parallel/comm/nccl_group.h"
#include "tensor/creation.h"

namespace loom::parallel {
namespace {

constexpr int kPlaceBytes = 256;

std::string this_place(Device device) {
  char host[kPlaceBytes / 2] = {};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + device.str();
}

}  // namespace

DeviceChoice choose_device(const std::string& spec, int local_rank, int gpu_count) {
  if (spec != "cuda") return {Device::parse(spec), ""};
  LOOM_CHECK(gpu_count > 0, "--device cuda: this machine has no usable GPU");
  const Device device = Device::cuda(local_rank % gpu_count);
  if (local_rank < gpu_count) return {device, ""};
  return {device, detail::concat("local rank ", local_rank, " shares ", device, " (", gpu_count,
                                 gpu_count == 1 ? " GPU" : " GPUs", " for more ranks on this machine)")};
}

DeviceChoice device_for_rank(const std::string& spec) {
  return choose_device(spec, local_rank(), spec == "cuda" ? cuda_device_count() : 0);
}

const char* transport_name(Transport transport) {
  switch (transport) {
    case Transport::Direct: return "direct";
    case Transport::Nccl: return "nccl";
    case Transport::HostStaging: return "host staging";
  }
  return "?";
}

Transport choose_transport(Device device, const std::vector<std::string>& places) {
  // One rank on a GPU still needs a group that takes CUDA tensors (DDP,
  // ZeRO, FSDP and tensor parallelism issue their collectives at any size):
  // NCCL, with a communicator of one, as PyTorch does.
  if (!device.is_cuda()) return Transport::Direct;
  const std::set<std::string> distinct(places.begin(), places.end());
  return distinct.size() == places.size() ? Transport::Nccl : Transport::HostStaging;
}

std::shared_ptr<ProcessGroup> for_device(std::shared_ptr<ProcessGroup> group, Device device) {
  if (!device.is_cuda()) return group;
  // Every rank learns every rank's place, so all of them choose alike.
  const std::string mine = this_place(device);
  Tensor own = zeros({kPlaceBytes}, {.dtype = kUInt8});
  std::memcpy(own.raw_data(), mine.data(), std::min<size_t>(mine.size(), kPlaceBytes - 1));
  Tensor all = empty({kPlaceBytes * group->size()}, {.dtype = kUInt8});
  group->all_gather(all, own)->wait();
  std::vector<std::string> places;
  for (int r = 0; r < group->size(); ++r) places.emplace_back(static_cast<const char*>(all.raw_data()) + r * kPlaceBytes);
  switch (choose_transport(device, places)) {
    case Transport::Nccl: return NcclGroup::create(std::move(group), device);
    case Transport::HostStaging: return HostStagedGroup::wrap(std::move(group));
    case Transport::Direct: break;
  }
  return group;
}

}  // namespace loom::parallel
