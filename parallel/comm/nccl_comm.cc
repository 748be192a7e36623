#include "parallel/comm/nccl_comm.h"

#include <cstring>

#include "tensor/error.h"

namespace loom::parallel {
namespace {

[[noreturn]] void fail(ncclResult_t result, ncclComm_t comm, const std::string& what) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  LOOM_FAIL("nccl: ", what, " failed: ", ncclGetErrorString(result),
            last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string());
}

}  // namespace

std::string NcclComm::new_id() {
  ncclUniqueId id;
  const ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) fail(result, nullptr, "ncclGetUniqueId");
  return std::string(id.internal, sizeof(id.internal));
}

NcclComm::NcclComm(const std::string& id, int size, int rank) {
  ncclUniqueId unique;
  LOOM_INTERNAL_ASSERT(id.size() == sizeof(unique.internal), "an NCCL id has ", sizeof(unique.internal), " bytes");
  std::memcpy(unique.internal, id.data(), sizeof(unique.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // see the header: the backend's thread never waits inside NCCL
  const ncclResult_t result = ncclCommInitRankConfig(&comm_, size, unique, rank, &config);
  if (result != ncclSuccess && result != ncclInProgress) fail(result, comm_, "joining a communicator");
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr || aborted_) return;
  // ncclCommDestroy refuses, and so leaks, a communicator still joining or
  // carrying an error (ncclCommEnsureReady): abort those. A ready one has no
  // pending work (the group waited for it): destroying frees the rest.
  ncclResult_t state = ncclInProgress;
  if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || state != ncclSuccess)
    abort();
  else
    ncclCommDestroy(comm_);
}

void NcclComm::call(ncclResult_t result, const std::string& what) {
  if (result != ncclSuccess && result != ncclInProgress) fail(result, comm_, what);
}

bool NcclComm::ready(const std::string& what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
  if (result != ncclSuccess) fail(result, comm_, what);
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) fail(state, comm_, what);
  return true;
}

void NcclComm::abort() {
  if (comm_ == nullptr || aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

}  // namespace loom::parallel
