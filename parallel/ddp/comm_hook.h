// DDP communication hooks: how the Reducer averages one bucket of gradients
// over the ranks (PyTorch's DistributedDataParallel.register_comm_hook).
//
//   parallel::DistributedDataParallel ddp(model, pg);
//   ddp->register_comm_hook(parallel::compress_hook(kBFloat16));  // half the bytes
//
// The default hook all-reduces the bucket as it is (ReduceOp::Avg over its
// float32 gradients). compress_hook(kBFloat16 or kFloat16) rounds the bucket
// to 16 bits, averages that, and widens the average back into the bucket
// (PyTorch's bf16_compress_hook / fp16_compress_hook): half the bytes on the
// wire, for gradients that keep 8 (bfloat16) or 11 (float16) significant
// bits, and, for float16, only magnitudes from about 6e-8 to 65504.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

class CommHook {
 public:
  virtual ~CommHook() = default;
  // Starts averaging bucket number `index` (a flat tensor of gradients) over
  // `group`; the Reducer waits for the work, then calls finish().
  virtual WorkPtr launch(ProcessGroup& group, size_t index, const Tensor& bucket) = 0;
  // Leaves the average in `bucket`, once the work from launch() is done.
  virtual void finish(size_t /*index*/, const Tensor& /*bucket*/) {}
  // The bytes one rank contributes to the collective for `bucket`.
  virtual int64_t wire_bytes(const Tensor& bucket) const { return static_cast<int64_t>(bucket.nbytes()); }
  virtual std::string name() const = 0;
};

// The bucket all-reduced as it is (what DDP does without a hook).
std::shared_ptr<CommHook> allreduce_hook();

// The bucket rounded to `dtype` (kBFloat16 or kFloat16), averaged in it, and
// widened back. Each bucket's 16-bit copy is made at its first use and kept.
std::shared_ptr<CommHook> compress_hook(DType dtype);

}  // namespace loom::parallel
