#include "parallel/ddp/comm_hook.h"

#include <vector>

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {
namespace {

class AllReduceHook : public CommHook {
 public:
  WorkPtr launch(ProcessGroup& group, size_t, const Tensor& bucket) override {
    return group.all_reduce(bucket, ReduceOp::Avg);
  }
  std::string name() const override { return "allreduce"; }
};

class CompressHook : public CommHook {
 public:
  explicit CompressHook(DType dtype) : dtype_(dtype) {}

  WorkPtr launch(ProcessGroup& group, size_t index, const Tensor& bucket) override {
    NoGradGuard no_grad;
    const Tensor& low = low_copy(index, bucket);
    low.copy_(bucket);  // rounds to nearest even
    return group.all_reduce(low, ReduceOp::Avg);
  }

  void finish(size_t index, const Tensor& bucket) override {
    NoGradGuard no_grad;
    bucket.copy_(low_[index]);  // exact: every 16-bit value is a float32
  }

  int64_t wire_bytes(const Tensor& bucket) const override {
    return bucket.numel() * static_cast<int64_t>(element_size(dtype_));
  }
  std::string name() const override { return std::string(dtype_name(dtype_)) + " compression"; }

 private:
  // Bucket `index`'s 16-bit copy, made once (a bucket keeps its size).
  const Tensor& low_copy(size_t index, const Tensor& bucket) {
    if (low_.size() <= index) low_.resize(index + 1);
    Tensor& low = low_[index];
    if (!low.defined() || low.numel() != bucket.numel() || low.device() != bucket.device())
      low = empty({bucket.numel()}, {.dtype = dtype_, .device = bucket.device()});
    return low;
  }

  const DType dtype_;
  std::vector<Tensor> low_;  // per bucket
};

}  // namespace

std::shared_ptr<CommHook> allreduce_hook() { return std::make_shared<AllReduceHook>(); }

std::shared_ptr<CommHook> compress_hook(DType dtype) {
  LOOM_CHECK(is_16bit_floating(dtype), "compress_hook: gradients compress to bfloat16 or float16, not ", dtype);
  return std::make_shared<CompressHook>(dtype);
}

}  // namespace loom::parallel
