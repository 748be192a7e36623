#include "parallel/ddp/bucket_plan.h"

#include "tensor/error.h"

namespace loom::parallel {

std::vector<Bucket> plan_buckets(const TensorList& params, int64_t cap_bytes) {
  LOOM_CHECK(cap_bytes > 0, "DistributedDataParallel: bucket_cap_bytes must be positive, got ", cap_bytes);
  std::vector<Bucket> buckets;
  int64_t bucket_bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    const int64_t bytes = static_cast<int64_t>(p.nbytes());
    bool fits = false;
    if (!buckets.empty()) {
      const Tensor& first = params[buckets.back().front()];
      fits = first.dtype() == p.dtype() && first.device() == p.device() && bucket_bytes + bytes <= cap_bytes;
    }
    if (!fits) {
      buckets.emplace_back();
      bucket_bytes = 0;
    }
    buckets.back().push_back(k);
    bucket_bytes += bytes;
  }
  return buckets;
}

}  // namespace loom::parallel
