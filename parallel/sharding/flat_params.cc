#include "parallel/sharding/flat_params.h"

#include "autograd/grad_mode.h"
#include "tensor/creation.h"
#include "tensor/error.h"

namespace loom::parallel {

Pieces::Pieces(int64_t numel, int n) : starts_(n + 1, 0) {
  LOOM_CHECK(n >= 1 && numel >= 0, "Pieces: cannot cut ", numel, " elements into ", n, " pieces");
  for (int r = 0; r < n; ++r) starts_[r + 1] = starts_[r] + numel / n + (r < numel % n ? 1 : 0);
}

std::vector<int64_t> flat_offsets(const TensorList& params, const std::vector<size_t>& which) {
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (size_t k : which) {
    offsets.push_back(offset);
    offset += params[k].numel();
  }
  return offsets;
}

Tensor flatten_as_views(const TensorList& params, const std::vector<size_t>& which) {
  LOOM_CHECK(!which.empty(), "flatten_as_views: no parameters to flatten");
  const Tensor& first = params[which.front()];
  int64_t numel = 0;
  for (size_t k : which) {
    LOOM_CHECK(params[k].dtype() == first.dtype() && params[k].device() == first.device(),
               "flatten_as_views: parameter ", k, " is ", params[k].dtype(), " on ", params[k].device(),
               ", but parameter ", which.front(), " is ", first.dtype(), " on ", first.device(),
               "; one flat tensor holds one dtype on one device");
    numel += params[k].numel();
  }
  NoGradGuard no_grad;
  Tensor flat = empty({numel}, {.dtype = first.dtype(), .device = first.device()});
  const std::vector<int64_t> offsets = flat_offsets(params, which);
  for (size_t i = 0; i < which.size(); ++i) {
    const Tensor& p = params[which[i]];
    Tensor slot = flat.narrow(0, offsets[i], p.numel()).view(p.shape().vec());
    slot.copy_(p);
    p.set_data(slot);
  }
  return flat;
}

}  // namespace loom::parallel
