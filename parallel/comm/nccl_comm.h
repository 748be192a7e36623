// NcclComm: one NCCL communicator, used non-blocking (CUDA builds only).
//
// Joining a communicator and many NCCL calls may take time: connections are
// set up on first use, and each needs the peers to take part. In NCCL's
// non-blocking mode such a call returns ncclInProgress at once; the
// communicator is busy until ncclCommGetAsyncError says ncclSuccess, and no
// other call may be made on it until then. So the NCCL backend's thread never
// waits inside NCCL: it starts a call, goes on with other work (handshakes,
// other communicators), and comes back when ready() says so — or aborts the
// communicator when a deadline passes.
//
//   NcclComm comm(NcclComm::new_id(), /*size=*/2, /*rank=*/0);  // returns at once
//   while (!comm.ready("joining")) { ...other work... }
//   comm.call(ncclAllReduce(x, x, n, ncclFloat32, ncclSum, comm.get(), stream), "all_reduce");
//   while (!comm.ready("all_reduce")) { ... }
#pragma once

#include <nccl.h>

#include <string>

namespace loom::parallel {

class NcclComm {
 public:
  // A fresh unique id (ncclGetUniqueId), as bytes to send to the other ranks.
  static std::string new_id();

  // Starts joining communicator `id` as `rank` of `size` on the calling
  // thread's current CUDA device; returns at once.
  NcclComm(const std::string& id, int size, int rank);
  ~NcclComm();  // destroys it (aborts it if still joining or failed), or nothing more after abort()
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  // Checks the result of a call just made on this communicator: throws
  // loom::Error naming `what` and NCCL's own message on an error; the call
  // may still be in progress (see ready()).
  void call(ncclResult_t result, const std::string& what);
  // True once the last call (or the joining) is done; throws loom::Error on an
  // asynchronous error, such as a peer that failed or vanished.
  bool ready(const std::string& what);
  // Stops all its work at once, kernels on the GPU included; later calls fail.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
};

}  // namespace loom::parallel
