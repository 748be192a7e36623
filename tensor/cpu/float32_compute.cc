#include "tensor/cpu/float32_compute.h"

#include "tensor/cpu/cpu_backend.h"
#include "tensor/creation.h"

namespace loom::cpu {

TensorList widen_16bit(TensorRefs tensors) {
  TensorList wide;
  wide.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (!t.defined() || !is_16bit_floating(t.dtype())) {
      wide.push_back(t);
      continue;
    }
    Tensor w = empty(t.shape(), {.dtype = kFloat32});
    cpu_backend().copy(t, w);
    wide.push_back(w);
  }
  return wide;
}

void round_into_16bit(const TensorList& wide, TensorRefs tensors, std::initializer_list<int> outputs) {
  for (int i : outputs) {
    const Tensor& out = tensors.begin()[i].get();
    if (wide[i].defined() && wide[i].impl() != out.impl()) cpu_backend().copy(wide[i], out);
  }
}

}  // namespace loom::cpu
