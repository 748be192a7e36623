// Copies between two tensors on one GPU, converting the dtype, over any
// strides (the device half of CudaBackend::copy, copy.cc): one kernel per
// (source, destination) dtype pair, run by loops.cuh.
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/loops.cuh"

namespace loom::cuda {
namespace {

template <typename S, typename D>
struct Convert {
  __device__ D operator()(S x) const {
    if constexpr (std::is_same_v<D, bool>) return x != S(0);
    else return static_cast<D>(x);
  }
};

}  // namespace

void convert_on_device(const Tensor& src, const Tensor& dst) {
  dispatch_all(src.dtype(), "copy", [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_all(dst.dtype(), "copy", [&](auto dst_tag) {
      using D = decltype(dst_tag);
      launch_elementwise<1, D, S>(dst, {&src}, Convert<S, D>{});
    });
  });
}

}  // namespace loom::cuda
