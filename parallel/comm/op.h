// Op: one communication operation as a backend sees it — what to do, on which
// tensors, and the Work to complete. ProcessGroup checks the arguments and
// builds it; the backend's communication thread runs it. Backends only.
//
//   auto op = std::make_shared<Op>(OpKind::AllReduce);
//   op->input = op->output = grad;
//   op->where();   // "rank 1: all_reduce #3 (sum, 1000 x float32)", for messages
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/reduce_op.h"
#include "parallel/comm/work.h"
#include "tensor/tensor.h"

namespace loom::parallel {

// The values travel in descriptors between ranks: keep them stable.
enum class OpKind : int64_t {
  AllReduce = 1,
  Broadcast = 2,
  AllGather = 3,
  ReduceScatter = 4,
  Barrier = 5,
  Send = 6,
  Recv = 7,
};

const char* op_kind_name(OpKind kind);  // "all_reduce", as the ProcessGroup method
inline bool is_p2p(OpKind kind) { return kind == OpKind::Send || kind == OpKind::Recv; }

struct Op {
  explicit Op(OpKind kind) : kind(kind), work(std::make_shared<Work>()) {}

  OpKind kind;
  // Collectives are numbered 1, 2, ... in the order the group issued them (the
  // same number on every rank); sends and receives have their own numbering.
  int64_t seq = 0;
  int rank = 0;        // the rank that issued it
  int group_size = 1;
  ReduceOp reduce = ReduceOp::Sum;  // all_reduce, reduce_scatter
  int peer = -1;                    // broadcast: the root; send: dst; recv: src
  int tag = 0;                      // send, recv
  std::chrono::steady_clock::time_point issued_at;  // when the caller issued it: its trace span's start
  uint64_t flight_id = 0;  // its entry in the flight record (flight_recorder.h); 0: not recorded
  // all_reduce, broadcast, send, recv: input and output are the same tensor.
  // all_gather: output is the ranks' inputs concatenated in rank order.
  // reduce_scatter: input is split among the ranks by their outputs' sizes.
  Tensor input;
  Tensor output;
  // all_gather into a list: `output` is a temporary that finish() copies
  // into these, one per rank.
  std::vector<Tensor> outputs;
  WorkPtr work;

  // A finished op lets go of its tensors (release_tensors(), before its Work
  // completes), so that a waiter's memory is its own again at once; its
  // messages still give the sizes.
  void release_tensors();

  DType dtype() const { return input.defined() ? input.dtype() : released_.dtype; }
  int64_t input_numel() const { return input.defined() ? input.numel() : released_.input_numel; }
  int64_t output_numel() const { return output.defined() ? output.numel() : released_.output_numel; }
  // Bytes the operation is about, for statistics (nccl-tests' "size"): the
  // tensor for all_reduce, broadcast, send and recv; the concatenated output
  // of all_gather; the input of reduce_scatter; nothing for a barrier.
  int64_t payload_bytes() const;
  // Bytes each rank moves over its link with a bandwidth-optimal algorithm
  // (payload x nccl-tests' bus factor: 2(n-1)/n for all_reduce, (n-1)/n for
  // all_gather and reduce_scatter, 1 for the rest).
  int64_t bus_bytes() const;

  // "all_reduce #3 (sum, 1000 x float32)" / "recv #2 from rank 0 (tag 5, 4 x int64)".
  std::string describe() const;
  // "rank 1: " + describe(): how every error about this op begins.
  std::string where() const;

 private:
  struct Released {
    DType dtype = kFloat32;
    int64_t input_numel = 0, output_numel = 0;
  } released_;
};

using OpPtr = std::shared_ptr<Op>;

// "0.25 s", "300 s": durations in error messages.
std::string seconds_text(std::chrono::milliseconds duration);

}  // namespace loom::parallel
