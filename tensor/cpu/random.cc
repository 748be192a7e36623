// CPU random draws: element i of each draw comes from random_draw.h, so the
// numbers do not depend on the thread count (or on the device).
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cpu/float32_compute.h"
#include "tensor/cpu/parallel.h"
#include "tensor/element_cast.h"
#include "tensor/random_draw.h"

namespace loom::cpu {

void CpuBackend::random(RandomOp op, const Tensor& out, double a, double b, const Draw& draw) {
  LOOM_INTERNAL_ASSERT(draw.device_state == nullptr, "random: a graph's relative draw reached the CPU backend");
  if (run_in_float32({out}, {0}, [&](const TensorList& t) { random(op, t[0], a, b, draw); })) return;
  const uint64_t seed = draw.seed, offset = draw.offset;
  dispatch_all(out.dtype(), "random", [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data_ptr<T>();
    parallel_for(out.numel(), 4096, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        switch (op) {
          case RandomOp::Uniform:
            o[i] = element_cast<T>(random_draw::uniform(seed, offset, i, a, b));
            break;
          case RandomOp::Normal:
            o[i] = element_cast<T>(random_draw::normal(seed, offset, i, a, b));
            break;
          case RandomOp::RandInt:
            o[i] = static_cast<T>(random_draw::randint(seed, offset, i, static_cast<int64_t>(a),
                                                       static_cast<int64_t>(b)));
            break;
          case RandomOp::Bernoulli:
            o[i] = static_cast<T>(random_draw::bernoulli(seed, offset, i, a));
            break;
        }
      }
    });
  });
}

}  // namespace loom::cpu
