// Copies between two tensors on one GPU, converting the dtype, over any
// strides (the device half of CudaBackend::copy, copy.cc): one kernel per
// (source, destination) dtype pair, run by loops.cuh.
#include <type_traits>

#include "tensor/cuda/cuda_backend.h"
#include "tensor/cuda/half.cuh"
#include "tensor/cuda/loops.cuh"

namespace loom::cuda {
namespace {

// 16-bit floats convert through float (half.cuh), as on the CPU.
template <typename S, typename D>
struct Convert {
  __device__ D operator()(S x) const {
    if constexpr (std::is_same_v<D, bool>) return widen(x) != compute_of_t<S>(0);
    else return narrow_to<D>(widen(x));
  }
};

}  // namespace

void convert_on_device(const Tensor& src, const Tensor& dst) {
  dispatch_any_storage(src.dtype(), "copy", [&](auto src_tag, auto) {
    using S = decltype(src_tag);
    dispatch_any_storage(dst.dtype(), "copy", [&](auto dst_tag, auto) {
      using D = decltype(dst_tag);
      launch_elementwise<1, D, S>(dst, {&src}, Convert<S, D>{});
    });
  });
}

}  // namespace loom::cuda
